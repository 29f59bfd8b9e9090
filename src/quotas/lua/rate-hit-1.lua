-- rate-hit: counts one request in a fixed window (a client token's mutating requests, src/quotas/token-rate.ts).
-- KEYS[1] the window's counter (a string that expires with its window)
-- ARGV[1] the window's length (ms)
-- Returns {count, ms left}: the count includes this request; the first request of a window opens it (as does one
-- finding a counter without expiry, which never outlives one window so).
local n = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if n == 1 or ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {n, ttl}
