-- Drops an expired lease's index entries, only while no lease is held: a lease taken again in
-- the meantime keeps its entries (bot.state.lease). KEYS: lease, leases index, lease start
-- times. ARGV: session. Returns 1.
--! keys: live_turn leases lease_starts
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
end
return 1
