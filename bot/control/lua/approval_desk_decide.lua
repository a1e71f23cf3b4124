-- Decides one approve or deny press on a waiting call (bot.control.approval_desk); queues the
-- parked continuation once every request of the turn is decided.
-- KEYS: approvals hash, awaiting job, turns stream, approvals-due index, closing marker,
-- kill switch, participants set, first-approvals hash. ARGV: call id, verdict, who, now,
-- digest, refusal reason ('' when the press is authorized), session id, '1' when participants
-- may not approve (the two-person rule applies), approvals needed, first approvals' TTL.
-- Returns {outcome, detail}: unknown, decided, refused (why), recorded, ok or expired.
--! keys: session.approvals awaiting turns_stream session.approvals_due session.closing killswitch participants first_approvals
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'unknown', ''} end
local a = cjson.decode(raw)
local now = tonumber(ARGV[4])
local function save() redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(a)) end
if a['verdict'] ~= 'pending' then return {'decided', a['verdict']} end
if redis.call('EXISTS', KEYS[5]) == 1 then return {'decided', 'closed'} end
if ARGV[2] == 'approved' and redis.call('EXISTS', KEYS[6]) == 1 then
  ARGV[6] = 'the kill switch is on'
end
if ARGV[6] == '' and ARGV[8] == '1' and redis.call('SISMEMBER', KEYS[7], ARGV[3]) == 1 then
  ARGV[6] = 'a destructive call needs a second person: you redirected or answered this analysis'
end
local first = nil
if ARGV[6] == '' and ARGV[2] == 'approved' and tonumber(ARGV[9]) > 1 then
  first = redis.call('HGET', KEYS[8], ARGV[1])
  if first == ARGV[3] then
    ARGV[6] = "a scheduled job's destructive call needs two people: you approved it already"
  end
end
local outcome = 'ok'
if now > tonumber(a['expires_at']) then
  a['verdict'] = 'expired'
  a['decided_by'] = ''
  a['decided_at'] = now
  outcome = 'expired'
elseif ARGV[6] ~= '' or a['digest'] ~= ARGV[5] then
  local why = ARGV[6]
  if why == '' then why = 'the button shows other arguments' end
  local refusals = a['refusals']
  if type(refusals) ~= 'table' then refusals = {} end
  table.insert(refusals, ARGV[3] .. ': ' .. why)
  a['refusals'] = refusals
  save()
  return {'refused', why}
elseif tonumber(ARGV[9]) > 1 and ARGV[2] == 'approved' and not first then
  redis.call('HSET', KEYS[8], ARGV[1], ARGV[3])
  redis.call('EXPIRE', KEYS[8], ARGV[10])
  return {'recorded', ''}
else
  a['verdict'] = ARGV[2]
  a['decided_by'] = ARGV[3]
  a['decided_at'] = now
end
save()
local turn = a['turn_id']
for _, value in ipairs(redis.call('HVALS', KEYS[1])) do
  local other = cjson.decode(value)
  if other['turn_id'] == turn and other['verdict'] == 'pending' then
    return {outcome, a['verdict']}
  end
end
local job = redis.call('GET', KEYS[2])
if job then
  redis.call('XADD', KEYS[3], '*', 'job', job)
  redis.call('DEL', KEYS[2])
end
redis.call('ZREM', KEYS[4], ARGV[7])
return {outcome, a['verdict']}
