-- record: adds the counters of committed turns to their tenant's day and keeps the day USAGE_RETENTION_DAYS from
-- now, in one command (src/cost/spend.ts: the turns of one event-loop turn together).
-- KEYS[1] the day's hash (`q:{<tenant>}:usage:<YYYY-MM-DD>`)
-- ARGV[1] the TTL (s)  ARGV[2..] field, increment, field, increment, … (the caller leaves out zeros)
-- Returns 1.
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
