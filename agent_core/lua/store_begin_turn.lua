-- Starts a turn in one round trip (agent_core._store): refuses a tombstoned turn, appends the turn's
-- inputs once (a re-run of the same turn id does not append them again), moves every queued steer
-- into the history in arrival order, and returns the history. Any ring so far is answered by this
-- very script (the tombstone it checks, the steers it absorbs). A drain request is for the run that
-- was live when it was made: a resumed run of the same turn starts without it.
-- The history is returned from the caller's cached length on when its cache still holds
-- (agent_core._history_cache): the generation is the one cached (no rewrite since), the list is at
-- least that long (appends only grow it), and its item at that length - 1 is the one cached (its
-- SHA-1: a list deleted and written again behind the store's back). Else it is returned whole.
-- KEYS: tombstone, begun marker, history, steers, drain marker, fence key (the history
-- when unfenced), history generation. ARGV: marker ttl, fencing token ('' when unfenced), cached
-- generation, cached length (0: nothing cached), SHA-1 of the cached last item, then the inputs.
-- Returns {2, {}, 0} when fenced, {1, {}, 0} when tombstoned, else
-- {0, the history from `from` on, steers, generation, from}.
--! uses: fence
--! keys: session.tombstone session.begun session.history session.steers session.drain live_turn session.history_generation
if ARGV[2] ~= '' and not fenced(KEYS[6], ARGV[2]) then return {2, {}, 0} end
redis.call('DEL', KEYS[5])
if redis.call('EXISTS', KEYS[1]) == 1 then return {1, {}, 0} end
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  for i = 6, #ARGV do redis.call('RPUSH', KEYS[3], ARGV[i]) end
end
local steers = redis.call('LRANGE', KEYS[4], 0, -1)
for _, item in ipairs(steers) do redis.call('RPUSH', KEYS[3], item) end
if #steers > 0 then redis.call('DEL', KEYS[4]) end
local generation = tonumber(redis.call('GET', KEYS[7]) or '0')
local cached = tonumber(ARGV[4])
local from = 0
if cached > 0 and generation == tonumber(ARGV[3]) and redis.call('LLEN', KEYS[3]) >= cached
    and redis.sha1hex(redis.call('LINDEX', KEYS[3], cached - 1)) == ARGV[5] then
  from = cached
end
return {0, redis.call('LRANGE', KEYS[3], from, -1), #steers, generation, from}
