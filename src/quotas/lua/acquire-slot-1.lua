-- acquire-slot: take one of a tenant's slots (open event streams) across replicas.
-- KEYS[1] the tenant's held slots (zset member `<replica>:<n>` -> expiry in ms of Redis's clock)
-- ARGV[1] how long the new slot lives (ms)  ARGV[2] the most slots  ARGV[3] the member
-- ARGV[4..] replicas whose liveness lapsed (src/quotas/slots.ts): their slots are dropped before the count
-- Returns 1 when the slot was taken, 0 when `max` live slots are held already (nothing written but the drop of
-- expired slots and of the lapsed replicas' slots). Expired slots (their replica died without releasing them, or
-- never said it was alive: a replica of an older version) are dropped first, so a crash frees its slots within
-- one TTL; a lapsed replica's are dropped at once, so a crash frees them within the liveness TTL.
-- Expiries are set and compared in Redis's clock (includes/now.lua; renew-slots-1.lua renews them in it): a
-- replica's own clock, 10 minutes ahead, took every other replica's live slots for expired (a tenant over its
-- quota), one behind kept a dead replica's slots counted 10 minutes past their expiry.
--- @include "../../store/lua/includes/now"
local now = now_ms()
local expiry = now + tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if #ARGV > 3 then
  local lapsed = {}
  for i = 4, #ARGV do lapsed[ARGV[i]] = true end
  local gone = {}
  for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local replica = string.match(member, '^(.+):%d+$')
    if replica and lapsed[replica] then gone[#gone + 1] = member end
  end
  -- ZREM in chunks: unpack's arguments are bounded by Lua's C stack.
  for i = 1, #gone, 1000 do
    redis.call('ZREM', KEYS[1], unpack(gone, i, math.min(i + 999, #gone)))
  end
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], expiry, ARGV[3])
redis.call('PEXPIREAT', KEYS[1], expiry)
return 1
