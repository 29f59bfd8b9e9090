-- due-claim: take up to `limit` tenants whose queue is due for a sweep, holding each until `hold` (its score set
-- there), so the replicas sweeping at once take different tenants; the sweeper then sets the tenant's next due time
-- (or drops it). A replica that dies mid-sweep leaves its tenants due again at `hold`.
-- KEYS[1] tt:due (ZSET tenant -> ms)
-- ARGV[1] limit  ARGV[2] hold (ms: each tenant taken is due again that long from now)
-- Returns the tenants taken. Due times are of Redis's clock (includes/now.lua), the one due-set-1.lua stores.
--- @include "../../store/lua/includes/now"
local now = now_ms()
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
for _, t in ipairs(due) do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), t) end
return due
