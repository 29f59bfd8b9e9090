-- pending: when a tenant's queue next needs a sweep (read only). The sweeper asks it again after taking the tenant
-- off `tt:due`, so a call queued meanwhile is never left unswept (src/tenant-tools/tasks.ts `reschedule`).
-- KEYS[1] leased  KEYS[2] deadline  KEYS[3] done  KEYS[4] gc  KEYS[5] owed
-- ARGV[1] none: the script takes no arguments
-- Returns {live, gc, now}: live and gc as includes/next-due.lua says (ms, -1: none), now of the clock they are in
-- (Redis's: includes/now.lua).
--- @include "includes/next-due"
--- @include "../../store/lua/includes/now"
local live, gc = next_due(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return {live, gc, now_ms()}
