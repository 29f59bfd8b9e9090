-- ingest-hit: counts a request's body bytes in its tenant's fixed window (TENANT_MAX_INGEST_BYTES_PER_MIN) and, for a
-- client token's request, in the token's own window (a quarter of it: src/quotas/ingest-bytes.ts), unless they
-- would take either window past its budget (then they are counted in neither: a refused body costs nothing).
-- KEYS[1] the tenant's window (a string that expires with its window)
-- KEYS[2] the token's window, or KEYS[1] again for a request made with the tenant's key
-- ARGV[1] the window's length (ms)  ARGV[2] the body's bytes  ARGV[3] the tenant's budget  ARGV[4] the token's budget
-- Returns {1 counted | 0 refused, ms left in the refusing window (0 when counted), 1 when the token's refused}.
-- The first bytes of a window always fit it (BODY_LIMIT bounds them) and open it, as do any finding a counter
-- without expiry (which never outlives one window so).
local add = tonumber(ARGV[2])
local function refused(key, max)
  local n = tonumber(redis.call('GET', key) or '0')
  if n == 0 or n + add <= max then return nil end
  local ttl = redis.call('PTTL', key)
  if ttl < 0 then
    redis.call('PEXPIRE', key, ARGV[1])
    ttl = tonumber(ARGV[1])
  end
  return ttl
end
local function count(key)
  redis.call('INCRBY', key, add)
  if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, ARGV[1]) end
end
local token = KEYS[2] ~= KEYS[1]
if token then
  local ttl = refused(KEYS[2], tonumber(ARGV[4]))
  if ttl then return {0, ttl, 1} end
end
local ttl = refused(KEYS[1], tonumber(ARGV[3]))
if ttl then return {0, ttl, 0} end
count(KEYS[1])
if token then count(KEYS[2]) end
return {1, 0, 0}
