-- Writes one settle record, once, fenced by the lease, with the usage and the books its
-- verdict names (bot.state.settle).
-- KEYS: lease, settle record, open turns, session usage, books: settles, automation,
-- no-final-reply. ARGV: lease token ('' for the reaper: allowed only while no lease is held),
-- record JSON, turn, automation flag, no-final flag, prompt tokens, completion tokens, cost,
-- record ttl, reason, session, book maxlen. Returns 1 written, 0 a duplicate, -1 fenced.
--! uses: fence
--! keys: live_turn settle open_turns usage book(settles) book(automation) book(no-final-reply)
if ARGV[1] == '' then
  if redis.call('GET', KEYS[1]) then return -1 end
elseif not fenced(KEYS[1], ARGV[1]) then
  return -1
end
if not redis.call('SET', KEYS[2], ARGV[2], 'NX', 'EX', ARGV[9]) then return 0 end
redis.call('SREM', KEYS[3], ARGV[3])
redis.call('HINCRBY', KEYS[4], 'turns', 1)
redis.call('HINCRBY', KEYS[4], 'prompt_tokens', ARGV[6])
redis.call('HINCRBY', KEYS[4], 'completion_tokens', ARGV[7])
redis.call('HINCRBYFLOAT', KEYS[4], 'cost', ARGV[8])
local entry = {'session', ARGV[11], 'turn', ARGV[3], 'reason', ARGV[10], 'record', ARGV[2],
  'cost', ARGV[8]}
redis.call('XADD', KEYS[5], 'MAXLEN', '~', ARGV[12], '*', unpack(entry))
if ARGV[4] == '1' then redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[12], '*', unpack(entry)) end
if ARGV[5] == '1' then redis.call('XADD', KEYS[7], 'MAXLEN', '~', ARGV[12], '*', unpack(entry)) end
return 1
