-- idem-keep: keep an answer of an Idempotency-Key for its TTL, within the tenant's bound of kept bytes: answers past
-- their TTL leave the count, then the oldest kept answers are forgotten (their keys run a new request) until the new
-- one fits. All keys of a tenant share its hash tag.
-- KEYS[1] the record (string)  KEYS[2] the tenant's kept answers (zset "<bytes>:<record key>" -> expiry ms)
-- KEYS[3] the tenant's kept bytes (string counter)
-- ARGV[1] the record (JSON)  ARGV[2] TTL (s)  ARGV[3] now (ms)  ARGV[4] most bytes kept for the tenant
-- Returns the number of older answers forgotten to make room.
local now = tonumber(ARGV[3])
local function forget(member, drop)
  local colon = string.find(member, ':', 1, true)
  local size = tonumber(string.sub(member, 1, colon - 1))
  if drop then redis.call('DEL', string.sub(member, colon + 1)) end
  redis.call('DECRBY', KEYS[3], size)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)) do forget(m, false) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local size = #ARGV[1]
local max = tonumber(ARGV[4])
local forgotten = 0
while tonumber(redis.call('GET', KEYS[3]) or '0') + size > max do
  local oldest = redis.call('ZPOPMIN', KEYS[2])
  if #oldest == 0 then break end
  forget(oldest[1], true)
  forgotten = forgotten + 1
end
local ttl_ms = tonumber(ARGV[2]) * 1000
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl_ms)
redis.call('ZADD', KEYS[2], now + ttl_ms, size .. ':' .. KEYS[1])
redis.call('INCRBY', KEYS[3], size)
redis.call('PEXPIRE', KEYS[2], ttl_ms)
redis.call('PEXPIRE', KEYS[3], ttl_ms)
return forgotten
