-- Claims the right to show a card state (bot.publishing.card_record): refused for an older
-- token, or once the card is final. A final state is indexed as undelivered.
-- KEYS: card record, undelivered-finals index. ARGV: token, final flag, card JSON, session.
-- Returns the new sequence number, or 0 when refused.
--! keys: card undelivered_cards
if redis.call('HGET', KEYS[1], 'final') == '1' then return 0 end
local token = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token > tonumber(ARGV[1]) then return 0 end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'state', ARGV[3], 'final', ARGV[2])
if ARGV[2] == '1' then
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'delivered', 'sending:' .. now[1])
  redis.call('SADD', KEYS[2], ARGV[4])
end
return seq
