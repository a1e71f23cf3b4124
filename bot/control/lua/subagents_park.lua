-- Parks the continuation of a turn that ended to wait (dispatched, or a child that asked), once
-- per turn, fenced by the lease; queues it at once when there is nothing to wait for, a stop
-- came first, or a redirect is queued (bot.control.subagents).
-- KEYS: the session's lease, open turns, the suspended turn's tombstone, the continuation's
-- tombstone, registry, parked job, turns stream, parked marker, steer queue, inbox.
-- ARGV: fencing token, continuation turn, ttl, job, the turn that ended, what it waits for
-- (`children`: the dispatch's children; a child id: that child's answer).
-- Returns 0 fenced, 1 parked, 2 queued at once, 3 parked before.
--! uses: fence
--! keys: live_turn open_turns session.tombstone session.tombstone children@parent awaiting turns_stream parked session.steers inbox
if not fenced(KEYS[1], ARGV[1]) then return 0 end
if not redis.call('SET', KEYS[8], ARGV[2], 'NX', 'EX', ARGV[3]) then return 3 end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
local stop = redis.call('GET', KEYS[3])
if stop then redis.call('SET', KEYS[4], stop, 'EX', ARGV[3]) end
local waiting, asked = false, false
for _, value in ipairs(redis.call('HVALS', KEYS[5])) do
  local c = cjson.decode(value)
  if ARGV[6] == 'children' then
    if c['state'] == 'pending' or c['state'] == 'running' then waiting = true end
    if c['state'] == 'awaiting' then asked = true end
  elseif c['child_id'] == ARGV[6] and c['state'] == 'awaiting' then
    waiting = true
  end
end
-- A question asked while the parent still ran found nothing parked to wake: unread in the
-- inbox, it wakes the parent now rather than after every sibling reported.
if asked and redis.call('LLEN', KEYS[10]) > 0 then waiting = false end
if stop or not waiting or redis.call('LLEN', KEYS[9]) > 0 then
  redis.call('XADD', KEYS[7], '*', 'job', ARGV[4])
  return 2
end
redis.call('SET', KEYS[6], ARGV[4], 'EX', ARGV[3])
return 1
