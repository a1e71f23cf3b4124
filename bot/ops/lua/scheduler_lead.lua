-- Takes or renews the scheduler's leader lock (bot.ops.scheduler).
-- KEYS: lock. ARGV: holder, ttl ms. Returns 1 when the caller holds the lock afterwards.
--! keys: "{chatops}:scheduler:leader"
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
