-- Attaches a new owner to a live card of the same thread (bot.publishing.card_record).
-- KEYS: card record, lease. ARGV: token, platform, channel, thread, ttl.
-- Returns the card's message id, or '' when a new card must be posted (none yet, or the last
-- one is final; a live card's post begun and never recorded stays in `posting`); the error
-- reply 'lease' when the lease is not the token's.
--! uses: fence
--! keys: card live_turn
if not fenced(KEYS[2], ARGV[1]) then return redis.error_reply('lease') end
local rec = redis.call('HMGET', KEYS[1], 'final', 'message_id', 'thread', 'platform', 'posting')
local same = rec[1] == '0' and rec[3] == ARGV[4] and rec[4] == ARGV[2]
if same and rec[2] and rec[2] ~= '' then
  redis.call('HSET', KEYS[1], 'token', ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return rec[2]
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'seq', 0, 'final', '0', 'platform', ARGV[2],
  'channel', ARGV[3], 'thread', ARGV[4], 'message_id', '')
if same and rec[5] then
  -- the card of this thread whose post was never recorded: its key goes on to the next post
  redis.call('HSET', KEYS[1], 'posting', rec[5])
end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return ''
