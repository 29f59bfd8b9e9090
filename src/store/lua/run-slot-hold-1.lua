-- run-slot-hold: a session that is running holds its slot among the tenant's active runs again, without a check
-- (a run's heartbeat, a takeover's claim: src/store/runs.ts `keep`).
-- KEYS[1] the tenant's active runs (zset session id -> ms of Redis's clock when its slot was taken or last held)
-- ARGV[1] session id
-- Returns 1 when the slot was taken again (it had been given back or dropped), 0 when it was held (its date moved).
-- Dated by Redis's now (includes/now.lua), the clock run-slot-take-1.lua ages the slots by.
--- @include "includes/now"
return redis.call('ZADD', KEYS[1], now_ms(), ARGV[1])
