-- due-settle: move or drop a member of a due set (actions:due, sessions:expiry) only if its score is still the one
-- the sweeper read, so a deadline registered meanwhile by another write is never lost.
-- KEYS[1] the due set (zset)
-- ARGV[1] member  ARGV[2] the score read (as ZRANGEBYSCORE gave it)  ARGV[3] the new score, or '' to drop it
-- Returns 1 if moved or dropped, 0 if the score had changed (nothing written).
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then redis.call('ZREM', KEYS[1], ARGV[1]) else redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1]) end
return 1
