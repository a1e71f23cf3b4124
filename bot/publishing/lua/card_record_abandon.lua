-- The reaper's finalization of a card (bot.publishing.card_record): only while no lease is
-- held, only a live card, and only if nobody wrote the card since it was read.
-- KEYS: card record, lease, undelivered-finals index. ARGV: session, final state, the
-- sequence number it was built from. Returns 1 when done, 0 otherwise.
--! keys: card live_turn undelivered_cards
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('HGET', KEYS[1], 'final') ~= '0' then return 0 end
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[3] then return 0 end
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], 'final', '1', 'delivered', 'sending:' .. now[1], 'state', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('SADD', KEYS[3], ARGV[1])
return 1
