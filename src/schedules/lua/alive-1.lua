-- alive: records that a replica's scheduler runs now, and answers since when replicas have run without a gap.
-- KEYS[1] the liveness hash (schedules:alive: since, last)
-- ARGV[1] the gap (ms): a beat later than this after the last one starts a new run
-- Returns the start (ms) of the unbroken run of beats this one belongs to: fires due before it came while no
-- replica ran (they collapse into one); fires due since came while one did (each is owed, however late). Beats are
-- of Redis's clock (includes/now.lua), so replicas whose clocks disagree neither open a gap nor hide one.
--- @include "../../store/lua/includes/now"
local f = redis.call('HMGET', KEYS[1], 'since', 'last')
local now = now_ms()
local at = string.format('%d', now)
local since = tonumber(f[1] or '')
local last = tonumber(f[2] or '')
if not since or not last or now - last > tonumber(ARGV[1]) then
  since = now
  redis.call('HSET', KEYS[1], 'since', at)
end
-- A beat of an older replica (its own clock, ahead) is not moved back.
if not last or now > last then redis.call('HSET', KEYS[1], 'last', at) end
return since
