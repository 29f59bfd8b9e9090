-- due-set: reschedule an endpoint in the global due set, unless someone changed its entry meanwhile.
-- KEYS[1] due set (zset webhook -> ms)
-- ARGV[1] webhook id  ARGV[2] the score read before the claim  ARGV[3] next due ms (-1: remove)
-- An enqueue that raced with the claim set a fresh score (ZADD with its own time), so the comparison fails and its
-- message is not left waiting. Returns 1 when written.
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
if tonumber(ARGV[3]) < 0 then redis.call('ZREM', KEYS[1], ARGV[1]) else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
return 1
