-- Stops an analysis that waits holding no lease (for approvals, sub-agents or a parent's
-- answer): its open turns are tombstoned and rung, and its parked continuation is queued, so
-- it runs, answers what waits "interrupted" and ends without the model (bot.state.followups).
-- KEYS: open turns, the parked continuation job, the turns stream, the bell (a channel).
-- ARGV: the tombstone key prefix (the key of turn "", built by `Keys.tombstone`), who stopped,
-- tombstone ttl. Returns the turns.
--! keys: open_turns awaiting turns_stream session.bell
local turns = redis.call('SMEMBERS', KEYS[1])
for _, turn in ipairs(turns) do
  redis.call('SET', ARGV[1] .. turn, ARGV[2], 'EX', ARGV[3])
  redis.call('PUBLISH', KEYS[4], 'stop:' .. turn)
end
local job = redis.call('GET', KEYS[2])
if job then
  redis.call('XADD', KEYS[3], '*', 'job', job)
  redis.call('DEL', KEYS[2])
end
return turns
