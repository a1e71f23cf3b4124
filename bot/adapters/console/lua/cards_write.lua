-- Records a console card's post or update and appends it to the cards stream
-- (bot.adapters.console.cards). KEYS: message record, cards stream. ARGV: op, ttl, maxlen,
-- then the entry's field/value pairs. Returns 0, writing nothing, for an update of a message
-- that does not exist; 1 otherwise.
--! keys: console_message console_cards
if ARGV[1] == 'update' and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[1], '1', 'EX', ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 4))
return 1
