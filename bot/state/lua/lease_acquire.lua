-- Takes a session's lease if nobody holds it (bot.state.lease).
-- KEYS: lease, fence counter, leases index, lease start times. ARGV: worker, turn, ttl ms,
-- session. Returns {1, token} when taken, {0, remaining ms} when another holder has it.
--! keys: live_turn fence leases lease_starts
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, redis.call('PTTL', KEYS[1])} end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token .. '|' .. ARGV[1] .. '|' .. ARGV[2], 'PX', ARGV[3])
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[3], now_ms + tonumber(ARGV[3]), ARGV[4])
redis.call('ZADD', KEYS[4], 'NX', now_ms, ARGV[4])
return {1, token}
