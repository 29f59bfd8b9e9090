-- update: changes a schedule's fields if it exists, belongs to the tenant and is at the expected revision, and
-- logs `schedule.updated` (its data and the new revision) in the schedule's event log.
-- KEYS[1] the schedule (hash)  KEYS[2] its event log (stream)
-- ARGV[1] tenant  ARGV[2] expected revision ('' any)  ARGV[3] fields to set (JSON object of strings)
-- ARGV[4] fields to delete (JSON array)  ARGV[5] now (ms)  ARGV[6] event data (JSON)  ARGV[7] pub/sub channel
-- ARGV[8] most entries kept  ARGV[9] notice size limit  ARGV[10] most bytes kept
-- ARGV[11] the `next_run_at` the change was computed from ('' none), or '-' when it does not retime the schedule
-- Returns {1, new revision}, {0, 0} when there is no such schedule of the tenant, {-1, current} on a mismatch,
-- {-2, current} when a fire was claimed since the read (claim-2.lua moved `next_run_at`, leaving the revision): a
-- retiming computed before it would put the fire just taken back, or drop the next one.
--- @include "../../store/lua/includes/notice"
--- @include "../../store/lua/includes/event-log"
local f = redis.call('HMGET', KEYS[1], 'tenant', 'revision')
if f[1] ~= ARGV[1] then return {0, 0} end
if ARGV[2] ~= '' and ARGV[2] ~= f[2] then return {-1, tonumber(f[2])} end
if ARGV[11] ~= '-' and (redis.call('HGET', KEYS[1], 'next_run_at') or '') ~= ARGV[11] then
  return {-2, tonumber(f[2])}
end
for k, v in pairs(cjson.decode(ARGV[3])) do redis.call('HSET', KEYS[1], k, v) end
for _, k in ipairs(cjson.decode(ARGV[4])) do redis.call('HDEL', KEYS[1], k) end
local rev = redis.call('HINCRBY', KEYS[1], 'revision', 1)
local t = 'schedule.updated'
notice_before(KEYS[2], KEYS[1])
local id = log_xadd(KEYS[2], t, ARGV[6], tostring(rev), ARGV[5])
notice_add(tonumber(ARGV[9]), id, t, ARGV[5], tostring(rev), ARGV[6])
log_trim(KEYS[2], KEYS[1], tonumber(ARGV[8]), tonumber(ARGV[10]))
notice_publish(ARGV[7])
return {1, rev}
