-- mark-done: drop a session's mark once a sweep read its log after every write the mark covers.
-- KEYS[1] marks (zset session -> ms of the newest mark)
-- ARGV[1] session id  ARGV[2] the score the sweep read  ARGV[3] newest score that may be dropped (sweep start
-- minus the grace)
-- Returns 1 when dropped; 0 when the session was marked again (or the mark is too recent).
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) or tonumber(cur) > tonumber(ARGV[3]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
return 1
