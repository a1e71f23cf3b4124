-- Moves one child to a new state, unless it is final already (or the tree was stopped, for
-- anything but `cancelled`). A final state reports to the parent: a note in its inbox, and the
-- parent's parked continuation queued once none of its children is pending or running.
-- An `awaiting` child's question also goes to the inbox and wakes the parent
-- (bot.control.subagents).
-- KEYS: registry, tree-stopped marker, parent inbox, parent parked job, turns stream.
-- ARGV: child id, new state, report, question, now, inbox note ('' for none).
-- Returns {1, state now} when moved, {0, state} when not (or {0, ''}: no such child).
--! keys: children@parent tree_stopped@parent inbox@parent awaiting@parent turns_stream
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {0, ''} end
local c = cjson.decode(raw)
local final = {done = true, failed = true, cancelled = true}
if final[c['state']] then return {0, c['state']} end
local stopped = redis.call('EXISTS', KEYS[2]) == 1
if stopped and ARGV[2] ~= 'cancelled' then ARGV[2] = 'cancelled' end
c['state'] = ARGV[2]
c['updated_at'] = tonumber(ARGV[5])
if ARGV[3] ~= '' then c['report'] = ARGV[3] end
c['question'] = ARGV[4]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(c))
if stopped or ARGV[6] == '' then return {1, c['state']} end
redis.call('RPUSH', KEYS[3], ARGV[6])
redis.call('EXPIRE', KEYS[3], @INBOX_TTL@)
local wake = c['state'] == 'awaiting'
if final[c['state']] then
  wake = true
  for _, value in ipairs(redis.call('HVALS', KEYS[1])) do
    local other = cjson.decode(value)
    if other['state'] == 'pending' or other['state'] == 'running' then wake = false end
  end
end
if wake then
  local job = redis.call('GET', KEYS[4])
  if job then
    redis.call('XADD', KEYS[5], '*', 'job', job)
    redis.call('DEL', KEYS[4])
  end
end
return {1, c['state']}
