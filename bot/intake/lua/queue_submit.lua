-- Writes one accepted event (bot.intake.queue), in one round trip: reads the session's state,
-- picks the route the policy chose for that state, dedupes, writes, marks seen, and for a
-- steer or a stop appends who did it to the session's audit trail and says whether the session
-- dispatched sub-agents (a stop reaches them at once).
-- Returns {status, route, result, parent}: status 0 duplicate, 1 written, 2 ignored; parent 1
-- when a stopped session is a sub-agents' parent.
--
-- KEYS: the two dedupe markers, the turns stream, the session's key prefix (a name, not
-- a key of its own), and the set of parent sessions. The session's keys are that prefix followed
-- by the suffixes of `agent_core._keys.SessionKey` and `bot.keys.BotSessionKey`, substituted into
-- the placeholders by the loader from those enums (the one definition `Keys`/`BotKeys` build
-- their names from), so a call carries few arguments rather than one more per key it touches:
-- redis-py's command packing was the largest remaining cost of the webhook (bench/ingress.py).
-- ARGV: routes for the four states joined by '|' (unknown thread; known and idle; turns
-- queued; a turn live), the start job, the steer message, the event, the turn id a start
-- creates, the turn a stop button names, who stopped, the message's send time, its author's
-- qualified id, the audit event of a steer and of a stop ('' for none), the audit trail's
-- length cap and retention in seconds, and the session id.
--! keys: seen_event seen_message turns_stream session.session_prefix parents
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, '', '', 0} end
if KEYS[2] ~= KEYS[1] and redis.call('EXISTS', KEYS[2]) == 1 then return {0, '', '', 0} end
local p = KEYS[4]
local open_turns, bell = p .. '@OPEN_TURNS@', p .. '@BELL@'
local stopped_key = p .. '@STOPPED_AT@'
local state = 2
if redis.call('EXISTS', p .. '@LIVE_TURN@') == 1 then state = 4
elseif redis.call('SCARD', open_turns) > 0 then state = 3
elseif redis.call('EXISTS', p .. '@HISTORY@') == 0 then state = 1 end
local routes = {}
for r in string.gmatch(ARGV[1] .. '|', '([^|]*)|') do table.insert(routes, r) end
local route = routes[state]
if route == '' then return {2, '', '', 0} end
local keep, sent_at = @KEEP@, tonumber(ARGV[8])
local result = ''
local parent = 0
local function audited(event)
  if event == '' then return end
  local trail = p .. '@AUDIT@'
  redis.call('XADD', trail, 'MAXLEN', '~', ARGV[12], '*', 'event', event)
  redis.call('EXPIRE', trail, ARGV[13])
end
local function took_part()
  redis.call('SADD', p .. '@PARTICIPANTS@', ARGV[9])
  redis.call('EXPIRE', p .. '@PARTICIPANTS@', @PARTICIPANTS_TTL@)
end
-- An analysis suspended for approvals continues at once when redirected or stopped: its
-- waiting calls are answered "interrupted" by the continuation (already an open turn, so a
-- stop tombstones it and a steer joins it).
local function wake_awaiting()
  local job = redis.call('GET', p .. '@AWAITING@')
  if job then
    redis.call('XADD', KEYS[3], '*', 'job', job)
    redis.call('DEL', p .. '@AWAITING@')
  end
end
if route == 'start' then
  local stopped_at = tonumber(redis.call('GET', stopped_key) or '0')
  if sent_at > 0 and sent_at <= stopped_at then
    result = 'stopped-before-start'
  else
    result = redis.call('XADD', KEYS[3], '*', 'job', ARGV[2])
    redis.call('SADD', open_turns, ARGV[5])
    redis.call('EXPIRE', open_turns, keep)
    took_part()
  end
elseif route == 'steer' then
  wake_awaiting()
  took_part()
  redis.call('RPUSH', p .. '@STEERS@', ARGV[3])
  redis.call('EXPIRE', p .. '@STEERS@', keep)
  redis.call('PUBLISH', bell, 'steer')
  audited(ARGV[10])
elseif route == 'stop' then
  wake_awaiting()
  if sent_at > tonumber(redis.call('GET', stopped_key) or '0') then
    redis.call('SET', stopped_key, ARGV[8], 'EX', keep)
  end
  local turns = redis.call('SMEMBERS', open_turns)
  if ARGV[6] ~= '' and redis.call('SISMEMBER', open_turns, ARGV[6]) == 0 then
    table.insert(turns, ARGV[6])
  end
  for _, turn in ipairs(turns) do
    redis.call('SET', p .. '@TOMBSTONE@' .. turn, ARGV[7], 'EX', keep)
    redis.call('PUBLISH', bell, 'stop:' .. turn)
  end
  result = tostring(#turns)
  audited(ARGV[11])
  parent = redis.call('SISMEMBER', KEYS[5], ARGV[14])
elseif route == 'queue' or route == 'approve' then
  local key = p .. (route == 'queue' and '@INBOX@' or '@APPROVAL_PRESSES@')
  redis.call('RPUSH', key, ARGV[4])
  redis.call('EXPIRE', key, keep)
  if route == 'queue' then took_part() end
elseif route ~= 'killswitch' then
  return redis.error_reply('unknown route ' .. route)
end
redis.call('SET', KEYS[1], '1', 'EX', @DEDUPE_TTL@)
redis.call('SET', KEYS[2], '1', 'EX', @DEDUPE_TTL@)
return {1, route, result, parent}
