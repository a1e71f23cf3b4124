-- Takes the delivery of a recorded final state (bot.publishing.card_record).
-- KEYS: card record. ARGV: seconds after which a delivery in progress counts as abandoned.
-- Returns 1 when the caller must send it now, 0 otherwise.
--! keys: card
local state = redis.call('HGET', KEYS[1], 'delivered')
if not state or state == '1' then return 0 end
local now = tonumber(redis.call('TIME')[1])
local since = tonumber(string.match(state, '^sending:(%d+)$') or '')
if since and now - since < tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'delivered', 'sending:' .. now)
return 1
