-- ingest-hit: counts a request's body bytes in a tenant's fixed window (TENANT_MAX_INGEST_BYTES_PER_MIN,
-- src/quotas/ingest-bytes.ts), unless they would take the window past its budget (then they are not counted: a
-- refused body costs nothing).
-- KEYS[1] the window's counter (a string that expires with its window)
-- ARGV[1] the window's length (ms)  ARGV[2] the body's bytes  ARGV[3] the window's budget (bytes)
-- Returns {1 counted | 0 refused, bytes of the window so far, ms left}. The first bytes of a window open it (as do
-- any finding a counter without expiry, which never outlives one window so).
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
local add = tonumber(ARGV[2])
local ttl = redis.call('PTTL', KEYS[1])
if n + add > tonumber(ARGV[3]) and n > 0 then
  if ttl < 0 then
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    ttl = tonumber(ARGV[1])
  end
  return {0, n, ttl}
end
n = redis.call('INCRBY', KEYS[1], add)
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {1, n, ttl}
