-- finish: ends a schedule's pending fire, once: with the session it created (`schedule.fired`, the session joins
-- the schedule's runs) or refused (a quota, a body the create path no longer accepts: `schedule.skipped`).
-- KEYS[1] the schedule (hash)  KEYS[2] its event log (stream)  KEYS[3] its runs (zset: session id by fire time)
-- ARGV[1] the fire's time (ms)  ARGV[2] 'fired' | 'skipped'  ARGV[3] the session id ('' when skipped)
-- ARGV[4] event data (JSON)  ARGV[5] pub/sub channel  ARGV[6] most entries kept  ARGV[7] notice size limit
-- ARGV[8] most bytes kept  ARGV[9] most runs kept
-- Returns 1, or 0 when that fire is not pending (another replica finished it, or the schedule is gone).
-- `now` (updated_at, the event's time) is Redis's clock (includes/now.lua), as claim-2.lua's: with the finishing
-- replica's, one schedule's record and log mixed the replicas' clocks.
--- @include "../../store/lua/includes/notice"
--- @include "../../store/lua/includes/event-log"
--- @include "../../store/lua/includes/now"
if redis.call('HGET', KEYS[1], 'pending') ~= ARGV[1] then return 0 end
local at = string.format('%d', now_ms())
redis.call('HDEL', KEYS[1], 'pending', 'pending_until')
redis.call('HSET', KEYS[1], 'updated_at', at)
local t = 'schedule.skipped'
if ARGV[2] == 'fired' then
  t = 'schedule.fired'
  redis.call('HSET', KEYS[1], 'last_session', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'fires', 1)
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[3])
  local over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[9])
  if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1) end
else
  redis.call('HINCRBY', KEYS[1], 'skips', 1)
end
notice_before(KEYS[2], KEYS[1])
local id = log_xadd(KEYS[2], t, ARGV[4], nil, at)
notice_add(tonumber(ARGV[7]), id, t, at, '0', ARGV[4])
log_trim(KEYS[2], KEYS[1], tonumber(ARGV[6]), tonumber(ARGV[8]))
notice_publish(ARGV[5])
return 1
