-- pending: when a tenant's queue next needs a sweep (read only). The sweeper asks it again after taking the tenant
-- off `tt:due`, so a call queued meanwhile is never left unswept (src/tenant-tools/tasks.ts `reschedule`).
-- KEYS[1] leased  KEYS[2] deadline  KEYS[3] done  KEYS[4] gc  KEYS[5] owed
-- ARGV[1] none: the script takes no arguments
-- Returns {live, gc} as includes/next-due.lua says (ms, -1: none).
--- @include "includes/next-due"
local live, gc = next_due(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return {live, gc}
