-- run-due-read: the runs due by now of Redis's clock (includes/now.lua), the clock run-due-set-1.lua stores, oldest
-- first: the runs' sweep claims them (their lease lapsed, they were never claimed, or handed over).
-- KEYS[1] runs:due (ZSET session id -> ms)
-- ARGV[1] most ids returned
-- Returns the session ids due.
--- @include "includes/now"
return redis.call('ZRANGEBYSCORE', KEYS[1], 0, now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
