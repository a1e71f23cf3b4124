-- Gives a failed delivery back, so the next sweep retries it at once
-- (bot.publishing.card_record). KEYS: card record. Returns 1.
--! keys: card
local state = redis.call('HGET', KEYS[1], 'delivered')
if state and string.match(state, '^sending:') then redis.call('HSET', KEYS[1], 'delivered', '0') end
return 1
