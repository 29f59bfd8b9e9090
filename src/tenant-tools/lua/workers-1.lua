-- workers: the (tool, worker) pairs of a tenant as seen-2.lua recorded them, and now (read only), so the caller
-- compares their times in their own clock (Redis's: includes/now.lua), not its replica's.
-- KEYS[1] workers (ZSET `<tool> <worker_id>` -> ms; at most 1000 members, seen-2.lua)
-- ARGV[1] none: the script takes no arguments
-- Returns {now, member, ms, member, ms, ...}.
--- @include "../../store/lua/includes/now"
local out = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
table.insert(out, 1, now_ms())
return out
