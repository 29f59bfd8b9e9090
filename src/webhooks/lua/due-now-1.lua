-- due-now: makes an endpoint due now of Redis's clock (includes/now.lua) in the global due set, the clock
-- due-read-1.lua compares with (a replica's own clock, ahead, left it waiting that much longer).
-- KEYS[1] due set (zset webhook -> ms)
-- ARGV[1] webhook id  ARGV[2] 'fresh' (now to the microsecond, so the score differs from one a claim read in the
-- same millisecond: see due-set-1.lua), 'NX' (only when the endpoint is not due already) or 'LT' (never later than
-- it was)
-- Returns 1.
--- @include "../../store/lua/includes/now"
local at
if ARGV[2] == 'fresh' then
  local t = redis.call('TIME')
  at = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  redis.call('ZADD', KEYS[1], at, ARGV[1])
else
  at = now_ms()
  redis.call('ZADD', KEYS[1], ARGV[2], at, ARGV[1])
end
return 1
