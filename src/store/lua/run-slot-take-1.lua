-- run-slot-take: a slot among the tenant's active runs (TENANT_MAX_ACTIVE_RUNS), for a session about to run.
-- KEYS[1] the tenant's active runs (zset session id -> ms of Redis's clock when its slot was taken or last held)
-- ARGV[1] session id  ARGV[2] the grace (ms) of a slot just taken  ARGV[3] the most active runs
-- Returns 1 when the session holds a slot (it held one already: refreshed; or one was free: taken). Else nothing is
-- written, and it returns the slots older than the grace (session id, score, ...; empty when none is): those whose
-- session the caller reads, to drop the ones not running with run-slot-prune-1.lua (runs that ended without giving
-- theirs back). A younger slot is never a candidate: its session's write (`running`) may still be on its way, the
-- slot being taken first. Slots are given back when a run ends (ZREM).
-- The slots are dated and aged by Redis's clock (includes/now.lua; run-slot-hold-1.lua dates them in it too): a
-- replica's own clock, ahead by more than the grace, took a slot whose session was still being written for stale
-- (pruned: one run more than the limit); one behind kept stale slots from the prune for its skew (429s meanwhile).
--- @include "includes/now"
local now = now_ms()
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], now, ARGV[1])
  return 1
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]), 'WITHSCORES')
