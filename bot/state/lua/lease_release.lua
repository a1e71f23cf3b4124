-- Gives the lease up if it is still ours, and rings the session's free ring, a Pub/Sub channel
-- (bot.state.lease). KEYS: lease, leases index, free ring, lease start times. ARGV: token,
-- session. Returns 1 when released, 0 when the lease was not ours.
--! uses: fence
--! keys: live_turn leases lease_free lease_starts
if fenced(KEYS[1], ARGV[1]) then
  redis.call('DEL', KEYS[1])
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('ZREM', KEYS[4], ARGV[2])
  redis.call('PUBLISH', KEYS[3], 'free')
  return 1
end
return 0
