-- Acknowledges and deletes a turns-stream entry while the lease still carries the token
-- (bot.worker.turn_stream). KEYS: the session's lease, the turns stream. ARGV: fencing token,
-- group, entry id. Returns 1 when acknowledged (and deleted), 0 when the lease is no longer
-- this token's.
--! uses: fence
--! keys: live_turn turns_stream
if not fenced(KEYS[1], ARGV[1]) then return 0 end
redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
redis.call('XDEL', KEYS[2], ARGV[3])
return 1
