-- claim: takes a schedule's due fire, once whatever the number of replicas sweeping it. A fire that creates a
-- session is marked pending (its time in `pending`, leased to the claimer until `pending_until`), and the schedule
-- moves on to its next time, in this one script; `finish-3.lua` ends the pending fire once its session exists. A
-- fire skipped for overlap is recorded here and then (event `schedule.skipped`).
-- KEYS[1] the schedule (hash)  KEYS[2] its event log (stream)
-- ARGV[1] next_run_at the caller read (ms)  ARGV[2] the fire's time (ms)  ARGV[3] the next time ('' none)
-- ARGV[4] 'fire' | 'skip'  ARGV[5] pending lease (ms from now)  ARGV[6] skipped event data (JSON)
-- ARGV[7] pub/sub channel  ARGV[8] most entries kept  ARGV[9] notice size limit  ARGV[10] most bytes kept
-- ARGV[11] the revision the caller read
-- Returns 'ok', or why nothing was written: 'gone', 'paused', 'pending' (a fire is still pending), 'moved'
-- (another replica claimed this fire, or a PATCH changed the schedule since the read: its times, or the next time
-- after a due fire it kept, `next_after_due`, which ARGV[3] was computed from), 'early' (next_run_at is not due by
-- Redis's clock: the caller's clock runs ahead). `now` (the pending lease's start, updated_at, the event's time) is
-- Redis's clock (includes/now.lua), the one retake-1.lua compares the lease with.
--- @include "../../store/lua/includes/notice"
--- @include "../../store/lua/includes/event-log"
--- @include "../../store/lua/includes/now"
local f = redis.call('HMGET', KEYS[1], 'next_run_at', 'paused', 'pending', 'tenant', 'revision')
if not f[4] then return 'gone' end
if f[2] == '1' then return 'paused' end
if f[3] and f[3] ~= '' then return 'pending' end
if f[1] ~= ARGV[1] or (f[5] or '1') ~= ARGV[11] then return 'moved' end
local now = now_ms()
if tonumber(ARGV[1]) > now then return 'early' end
local at = string.format('%d', now)
redis.call('HDEL', KEYS[1], 'next_after_due')
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'next_run_at')
else
  redis.call('HSET', KEYS[1], 'next_run_at', ARGV[3])
end
redis.call('HSET', KEYS[1], 'last_fire_at', ARGV[2], 'updated_at', at)
if ARGV[4] == 'fire' then
  redis.call('HSET', KEYS[1], 'pending', ARGV[2], 'pending_until', string.format('%d', now + tonumber(ARGV[5])))
  return 'ok'
end
redis.call('HINCRBY', KEYS[1], 'skips', 1)
notice_before(KEYS[2], KEYS[1])
local id = log_xadd(KEYS[2], 'schedule.skipped', ARGV[6], nil, at)
notice_add(tonumber(ARGV[9]), id, 'schedule.skipped', at, '0', ARGV[6])
log_trim(KEYS[2], KEYS[1], tonumber(ARGV[8]), tonumber(ARGV[10]))
notice_publish(ARGV[7])
return 'ok'
