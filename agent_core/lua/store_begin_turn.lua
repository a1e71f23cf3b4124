-- Starts a turn in one round trip (agent_core._store): refuses a tombstoned turn, appends the turn's
-- inputs once (a re-run of the same turn id does not append them again), moves every queued steer
-- into the history in arrival order, and returns the history. It also empties the session's bell:
-- any ring so far is answered by this very script (the tombstone it checks, the steers it absorbs),
-- and a stale steer ring would otherwise cancel the new turn's tools. A drain request is for the
-- run that was live when it was made: a resumed run of the same turn starts without it.
-- KEYS: tombstone, begun marker, history, steers, bell, drain marker, fence key (the history
-- when unfenced). ARGV: marker ttl, fencing token ('' when unfenced), then the turn's inputs.
-- Returns {2, {}, 0} when fenced, {1, {}, 0} when tombstoned, else {0, history, steers}.
--! uses: fence
--! keys: session.tombstone session.begun session.history session.steers session.bell session.drain live_turn
if ARGV[2] ~= '' and not fenced(KEYS[7], ARGV[2]) then return {2, {}, 0} end
redis.call('DEL', KEYS[5], KEYS[6])
if redis.call('EXISTS', KEYS[1]) == 1 then return {1, {}, 0} end
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  for i = 3, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
end
local steers = redis.call('LRANGE', KEYS[4], 0, -1)
for _, item in ipairs(steers) do redis.call('RPUSH', KEYS[3], item) end
if #steers > 0 then redis.call('DEL', KEYS[4]) end
return {0, redis.call('LRANGE', KEYS[3], 0, -1), #steers}
