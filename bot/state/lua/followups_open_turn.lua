-- Opens a follow-up turn the chain created itself, carrying a stop of the current turn over
-- to it (bot.state.followups). KEYS: open turns, follow-ups, the current turn's tombstone, the
-- next turn's tombstone. ARGV: next turn, tombstone ttl. Returns 1.
--! keys: open_turns followups session.tombstone session.tombstone
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
local stop = redis.call('GET', KEYS[3])
if stop then redis.call('SET', KEYS[4], stop, 'EX', ARGV[2]) end
return 1
