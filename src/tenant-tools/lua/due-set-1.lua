-- due-set: when a tenant's queue next needs a sweep, `in` ms from now of Redis's clock (includes/now.lua), the clock
-- due-claim-1.lua compares with; or off `tt:due`.
-- KEYS[1] tt:due (ZSET tenant -> ms)
-- ARGV[1] tenant  ARGV[2] in (ms from now; '' to take the tenant off)  ARGV[3] 'LT' (never later than it was
-- already due) or '' (due then, whatever it was)
-- Returns the tenant's due time set (ms), or -1 when taken off.
--- @include "../../store/lua/includes/now"
if ARGV[2] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return -1
end
local at = now_ms() + math.max(0, math.floor(tonumber(ARGV[2])))
if ARGV[3] == 'LT' then
  redis.call('ZADD', KEYS[1], 'LT', at, ARGV[1])
else
  redis.call('ZADD', KEYS[1], at, ARGV[1])
end
return at
