-- Releases an incident's lock if the caller still holds it (bot.state.incidents).
-- KEYS: the lock. ARGV: owner. Returns 1 when released, 0 when another holds it (or nobody).
--! keys: incident_lock
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
