-- claim: takes a schedule's due fire, once whatever the number of replicas sweeping it. A fire that creates a
-- session is marked pending (its time in `pending`, leased to the claimer until `pending_until`), and the schedule
-- moves on to its next time, in this one script; `finish-3.lua` ends the pending fire once its session exists. A
-- fire skipped for overlap is recorded here and then (event `schedule.skipped`).
-- KEYS[1] the schedule (hash)  KEYS[2] its event log (stream)
-- ARGV[1] next_run_at the caller read (ms)  ARGV[2] the fire's time (ms)  ARGV[3] the next time ('' none)
-- ARGV[4] 'fire' | 'skip'  ARGV[5] now (ms)  ARGV[6] pending lease end (ms)  ARGV[7] skipped event data (JSON)
-- ARGV[8] pub/sub channel  ARGV[9] most entries kept  ARGV[10] notice size limit  ARGV[11] most bytes kept
-- Returns 'ok', or why nothing was written: 'gone', 'paused', 'pending' (a fire is still pending), 'moved'
-- (another replica claimed this fire, or a PATCH changed the schedule's times).
--- @include "../../store/lua/includes/notice"
--- @include "../../store/lua/includes/event-log"
local f = redis.call('HMGET', KEYS[1], 'next_run_at', 'paused', 'pending', 'tenant')
if not f[4] then return 'gone' end
if f[2] == '1' then return 'paused' end
if f[3] and f[3] ~= '' then return 'pending' end
if f[1] ~= ARGV[1] then return 'moved' end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'next_run_at')
else
  redis.call('HSET', KEYS[1], 'next_run_at', ARGV[3])
end
redis.call('HSET', KEYS[1], 'last_fire_at', ARGV[2], 'updated_at', ARGV[5])
if ARGV[4] == 'fire' then
  redis.call('HSET', KEYS[1], 'pending', ARGV[2], 'pending_until', ARGV[6])
  return 'ok'
end
redis.call('HINCRBY', KEYS[1], 'skips', 1)
notice_before(KEYS[2])
local id = log_xadd(KEYS[2], 'schedule.skipped', ARGV[7], nil, ARGV[5])
notice_add(tonumber(ARGV[10]), id, 'schedule.skipped', ARGV[5], '0', ARGV[7])
log_trim(KEYS[2], KEYS[1], tonumber(ARGV[9]), tonumber(ARGV[11]))
notice_publish(ARGV[8])
return 'ok'
