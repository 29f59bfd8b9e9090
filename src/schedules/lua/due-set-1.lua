-- due-set: puts a schedule's entry of schedules:due where its record says (or drops it), only if the entry is still
-- as the caller read it before it read the record (store.ts `resync`, as the session due sets' due-settle-1.lua): a
-- look that read the record before another write (a fire's end, a PATCH's retiming) and files it after that write's
-- own filing then finds the entry moved and leaves it, instead of putting back the time the record no longer has.
-- The record's hash is in another slot (a Redis Cluster), so it cannot be read here.
-- KEYS[1] schedules:due (ZSET schedule id -> ms)
-- ARGV[1] schedule id  ARGV[2] the score read ('' when there was no entry)  ARGV[3] the new score ('' drops it)
-- Returns 1 when written, 0 when the entry changed since it was read (nothing written).
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if cur then
  if ARGV[2] == '' or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
elseif ARGV[2] ~= '' then
  return 0
end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
end
return 1
