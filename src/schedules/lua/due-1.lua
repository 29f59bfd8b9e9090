-- due: the schedules to look at by now of Redis's clock (includes/now.lua), oldest first, and that now. A due
-- score is a fire's time (next_run_at) or a pending fire's lease (pending_until, Redis's clock: claim-2.lua,
-- retake-1.lua); the scheduler takes the now answered as its clock for the pass (a replica's own may be off).
-- KEYS[1] schedules:due (ZSET schedule id -> ms)
-- ARGV[1] most ids returned
-- Returns {now (ms), id, ...}.
--- @include "../../store/lua/includes/now"
local now = now_ms()
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
table.insert(out, 1, now)
return out
