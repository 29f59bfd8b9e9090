-- tree-due-read: the tenants with a sub-agent tree member due by now of Redis's clock (TIME, as includes/now.lua
-- reads it, to the microsecond: a wake-up's score carries its microseconds, tree-due-3.lua), earliest first, and
-- that now, which the agents' sweep then reads each tenant's due set by (src/store/tree-due.ts). A replica's own
-- clock, ahead, looked at members early (a parked parent every pass), behind, late (a child's end told late).
-- KEYS[1] the tenants' index (zset: tenant -> its earliest member's score)
-- ARGV[1] most tenants
-- Returns {now (ms, to the microsecond, as text), tenant, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
table.insert(out, 1, string.format('%.3f', now))
return out
