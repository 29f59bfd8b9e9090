-- rate-hit: counts one request in fixed windows of mutating requests: a client token's (src/quotas/token-rate.ts)
-- and its tenant's (RATE_LIMIT_PER_MIN), or one alone (a tenant key's request, through the rate limiter's store:
-- src/quotas/rate-store.ts; a client token's WebSocket frame). A request that either window refuses is counted in
-- neither: a refused request writes nothing (no counter made, none increased, no window extended), so traffic past
-- a limit costs no write and its window still ends when it began plus its length.
-- KEYS[1] the first window's counter (a string that expires with its window)
-- KEYS[2] the second window's, or KEYS[1] again for one window
-- ARGV[1] the windows' length (ms)  ARGV[2] KEYS[1]'s max  ARGV[3] KEYS[2]'s max
-- Returns {1 counted | 0 refused, the refusing window (1 or 2; 0 when counted), count, ms left}: when counted, the
-- count (this request included) and time left of the last window; when refused, those of the refusing window, the
-- count being the one this request would have made (its max + 1 or more).
-- The first request of a window opens it (its expiry), as does one finding a counter without expiry, which so never
-- outlives one window; a refusal finding such a counter gives it its expiry (else it would refuse for ever).
local function refused(key, max)
  local n = tonumber(redis.call('GET', key) or '0')
  if n < max then return nil end
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    redis.call('PEXPIRE', key, ARGV[1])
    ttl = tonumber(ARGV[1])
  end
  return {n + 1, ttl}
end
local function count(key)
  local n = redis.call('INCR', key)
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    redis.call('PEXPIRE', key, ARGV[1])
    ttl = tonumber(ARGV[1])
  end
  return {n, ttl}
end
local two = KEYS[2] ~= KEYS[1]
local r = refused(KEYS[1], tonumber(ARGV[2]))
if r then return {0, 1, r[1], r[2]} end
if two then
  r = refused(KEYS[2], tonumber(ARGV[3]))
  if r then return {0, 2, r[1], r[2]} end
  count(KEYS[1])
end
r = count(KEYS[2])
return {1, 0, r[1], r[2]}
