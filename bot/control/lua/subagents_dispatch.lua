-- Dispatches a sub-agent, once per child id: a dispatch run again (its batch resumed after a
-- crash) finds its child (bot.control.subagents).
-- KEYS: registry, turns stream, child's open turns, parents index, tree-stopped marker.
-- ARGV: child id, record, job, child turn, ttl, parent session.
-- Returns 1 dispatched, 2 dispatched before, 0 the tree was stopped.
--! keys: children@parent turns_stream open_turns parents tree_stopped@parent
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 2 end
if redis.call('EXISTS', KEYS[5]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('SADD', KEYS[3], ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[5])
redis.call('SADD', KEYS[4], ARGV[6])
redis.call('XADD', KEYS[2], '*', 'job', ARGV[3])
return 1
