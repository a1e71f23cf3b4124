-- Counts a new incident against its route's hourly limit (bot.state.incidents): a sliding
-- window of the incidents the route opened. KEYS: the route's opened set. ARGV: now (s),
-- window (s), limit, incident. Returns 1 when admitted (or admitted before), 0 when held back.
--! keys: alert_route_opened
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZSCORE', KEYS[1], ARGV[4]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
