-- Writes one routed alert notification (bot.intake.alert_intake) unless the same content was
-- written before: marks it seen and adds it to the alerts stream in one step, so nothing is
-- marked seen that was not written. KEYS: the content's dedupe marker, the alerts stream.
-- ARGV: the marker's ttl (s), the stream's approximate length cap, the entry's JSON.
-- Returns 1 when written, 0 for a duplicate.
--! keys: seen_alert alerts_stream
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) == false then return 0 end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'entry', ARGV[3])
return 1
