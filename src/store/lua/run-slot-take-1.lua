-- run-slot-take: a slot among the tenant's active runs (TENANT_MAX_ACTIVE_RUNS), for a session about to run.
-- KEYS[1] the tenant's active runs (zset session id -> ms when its slot was taken)
-- ARGV[1] session id  ARGV[2] now (ms)  ARGV[3] the most active runs
-- Returns 1 when the session holds a slot (it held one already: refreshed; or one was free: taken), 0 when
-- ARGV[3] other sessions hold one (nothing written). Slots are given back when a run ends (ZREM); slots of runs
-- that ended without giving theirs back are dropped by run-slot-prune-1.lua once the session is seen not running.
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  return 1
end
return 0
