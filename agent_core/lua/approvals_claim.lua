-- Claims a suspended batch for the turn that closes it, in one step, so no decision lands
-- after the claim (the desk's script refuses once `closing` is set): every request of the
-- batch still pending is decided `ARGV[3]` by `ARGV[4]`. Fenced like a history write
-- (agent_core._approvals).
-- KEYS: approvals hash, closing, fence key (any key when unfenced), continuation.
-- ARGV: fencing token ('' when unfenced), suspended turn, verdict, who, now, claiming turn, ttl.
-- Returns {0, {}, ''} when fenced, else {1, the batch's records, the continuation turn}.
--! uses: fence
--! keys: session.approvals session.closing live_turn session.continuation
if ARGV[1] ~= '' and not fenced(KEYS[3], ARGV[1]) then return {0, {}, ''} end
redis.call('SET', KEYS[2], ARGV[6], 'EX', ARGV[7])
local records = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local a = cjson.decode(all[i + 1])
  if a['turn_id'] == ARGV[2] then
    if a['verdict'] == 'pending' then
      a['verdict'] = ARGV[3]
      a['decided_by'] = ARGV[4]
      a['decided_at'] = tonumber(ARGV[5])
      redis.call('HSET', KEYS[1], all[i], cjson.encode(a))
    end
    table.insert(records, cjson.encode(a))
  end
end
return {1, records, redis.call('GET', KEYS[4]) or ''}
