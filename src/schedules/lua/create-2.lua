-- create: writes a new schedule's record and logs `schedule.created` (revision 1) in its event log, unless a
-- schedule of this id exists (a keyed create sent twice at once: the first one's stands).
-- KEYS[1] the schedule (hash)  KEYS[2] its event log (stream)
-- ARGV[1] now (ms)  ARGV[2] event data (JSON)  ARGV[3] pub/sub channel  ARGV[4] most entries kept
-- ARGV[5] notice size limit  ARGV[6] most bytes kept  ARGV[7…] the record's fields and values, alternating
-- Returns 1, or 0 when the schedule exists (nothing written).
--- @include "../../store/lua/includes/notice"
--- @include "../../store/lua/includes/event-log"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 7))
local t = 'schedule.created'
notice_before(KEYS[2], KEYS[1])
local id = log_xadd(KEYS[2], t, ARGV[2], '1', ARGV[1])
notice_add(tonumber(ARGV[5]), id, t, ARGV[1], '1', ARGV[2])
log_trim(KEYS[2], KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[6]))
-- A keyed create's id comes again only when its request is retried; should the schedule it made have been deleted
-- since, the log left for the deletion's readers must not expire under the new one.
redis.call('PERSIST', KEYS[2])
notice_publish(ARGV[3])
return 1
