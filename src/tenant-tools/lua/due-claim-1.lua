-- due-claim: take up to `limit` tenants whose queue is due for a sweep, holding each until `hold` (its score set
-- there), so the replicas sweeping at once take different tenants; the sweeper then sets the tenant's next due time
-- (or drops it). A replica that dies mid-sweep leaves its tenants due again at `hold`.
-- KEYS[1] tt:due (ZSET tenant -> ms)
-- ARGV[1] now ms  ARGV[2] limit  ARGV[3] hold until (ms)
-- Returns the tenants taken.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, t in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[3], t) end
return due
