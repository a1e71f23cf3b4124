-- Queues the continuation only while the lease still carries the token: a worker whose lease
-- was taken over must not queue a second runner of the analysis (docs/reliability.md Q5;
-- bot.state.followups). KEYS: the session's lease, open turns, the turns stream. ARGV: fencing
-- token, turn, job. Returns 1 when queued, 0 when fenced.
--! uses: fence
--! keys: live_turn open_turns turns_stream
if not fenced(KEYS[1], ARGV[1]) then return 0 end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[3], '*', 'job', ARGV[3])
return 1
