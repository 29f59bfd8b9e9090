-- run-due-set: when any replica's sweep may claim a session's run (`runs:due`): `in` ms from now of Redis's clock
-- (includes/now.lua), the clock run-due-read-1.lua compares with. A replica's own clock would make its runs due 10
-- minutes late for the others when it runs 10 minutes ahead (its hand-over, its crash), or at once when behind.
-- KEYS[1] runs:due (ZSET session id -> ms)
-- ARGV[1] session id  ARGV[2] in (ms from now; 0: due now)
-- Returns the due time set (ms, Redis's clock).
--- @include "includes/now"
local at = now_ms() + math.max(0, math.floor(tonumber(ARGV[2])))
redis.call('ZADD', KEYS[1], at, ARGV[1])
return at
