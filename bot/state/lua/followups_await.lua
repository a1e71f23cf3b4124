-- Opens the continuation of an analysis suspended for approvals and parks its job until the
-- desk queues it, fenced like a hand-over (bot.state.followups). Done once: a re-run of the
-- suspended turn finds the continuation marker and changes nothing. A stop that came first
-- (carried over like `open`), a redirect already queued, or requests already decided (an
-- expiry in between) queue it at once: nobody else would. The continuation is not a
-- follow-up: once queued it is a stream job like any other, taken over from the stream if its
-- worker dies.
-- KEYS: the session's lease, open turns, the suspended turn's tombstone, the continuation's
-- tombstone, the approvals hash, the awaiting job, the turns stream, the continuation marker,
-- the steer queue. ARGV: fencing token, continuation turn, ttl, job, suspended turn.
-- Returns 0 fenced, 1 parked, 2 queued at once, 3 done before.
--! uses: fence
--! keys: live_turn open_turns session.tombstone session.tombstone session.approvals awaiting turns_stream session.continuation session.steers
if not fenced(KEYS[1], ARGV[1]) then return 0 end
if redis.call('EXISTS', KEYS[8]) == 1 then return 3 end
redis.call('SET', KEYS[8], ARGV[2], 'EX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
local stop = redis.call('GET', KEYS[3])
if stop then redis.call('SET', KEYS[4], stop, 'EX', ARGV[3]) end
local waiting = false
for _, value in ipairs(redis.call('HVALS', KEYS[5])) do
  local a = cjson.decode(value)
  if a['turn_id'] == ARGV[5] and a['verdict'] == 'pending' then waiting = true end
end
if stop or not waiting or redis.call('LLEN', KEYS[9]) > 0 then
  redis.call('XADD', KEYS[7], '*', 'job', ARGV[4])
  return 2
end
redis.call('SET', KEYS[6], ARGV[4], 'EX', ARGV[3])
return 1
