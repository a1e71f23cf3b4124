-- Renews the lease (and may move it to a next turn of the same chain) only while it is ours
-- (bot.state.lease). KEYS: lease, leases index. ARGV: token, ttl ms, session, turn ('' keeps
-- the current turn). Returns 1, or 0 when the lease is not ours.
--! uses: fence
--! keys: live_turn leases
local held = fenced(KEYS[1], ARGV[1])
if not held then return 0 end
local worker, turn = string.match(held, '^%d+|([^|]*)|(.*)$')
if not worker then return 0 end
if ARGV[4] ~= '' then turn = ARGV[4] end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. worker .. '|' .. turn, 'PX', ARGV[2])
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[2]), ARGV[3])
return 1
