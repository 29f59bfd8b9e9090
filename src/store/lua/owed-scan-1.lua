-- owed-scan: one page of a tenant's owed records for the settle sweep, with Redis's time on the records' clock
-- (owed-add-1.lua stamps them with it), so the sweep's grace does not depend on its own clock.
-- KEYS[1] the tenant's owed records (hash)
-- ARGV[1] how many fields to ask HSCAN for
-- Returns {now ms, HSCAN cursor ('0': the whole hash was seen), {token, record, …}}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local page = redis.call('HSCAN', KEYS[1], '0', 'COUNT', ARGV[1])
return { now, page[1], page[2] }
