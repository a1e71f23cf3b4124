-- Records a new state of a final card (bot.publishing.card_record): the same analysis's card
-- shown again, still final (its answer marked wrong), never reopened. Only while the record is
-- the one its caller read: final, the same sequence number and the same message (a later
-- analysis in the thread posts a message of its own), and no sender holding an older state
-- (`delivered` is `sending:`). The state is then to be delivered again: the reaper's sweep
-- shows it on the platform, as any recorded final not yet shown.
-- KEYS: card record, undelivered-finals index. ARGV: session, new state, the sequence number
-- and message id it was built from. Returns the new sequence number, or 0 when refused.
--! keys: card undelivered_cards
local rec = redis.call('HMGET', KEYS[1], 'final', 'seq', 'message_id', 'delivered')
if rec[1] ~= '1' or rec[2] ~= ARGV[3] or rec[3] ~= ARGV[4] or ARGV[4] == '' then return 0 end
if rec[4] and string.match(rec[4], '^sending:') then return 0 end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'delivered', '0')
redis.call('SADD', KEYS[2], ARGV[1])
return seq
