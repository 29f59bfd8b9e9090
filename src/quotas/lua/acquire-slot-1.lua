-- acquire-slot: take one of a tenant's slots (open event streams) across replicas.
-- KEYS[1] the tenant's held slots (zset member `<replica>:<n>` -> expiry in ms since the epoch)
-- ARGV[1] now (ms)  ARGV[2] the new slot's expiry (ms)  ARGV[3] the most slots  ARGV[4] the member
-- ARGV[5..] replicas whose liveness lapsed (src/quotas/slots.ts): their slots are dropped before the count
-- Returns 1 when the slot was taken, 0 when `max` live slots are held already (nothing written but the drop of
-- expired slots and of the lapsed replicas' slots). Expired slots (their replica died without releasing them, or
-- never said it was alive: a replica of an older version) are dropped first, so a crash frees its slots within
-- one TTL; a lapsed replica's are dropped at once, so a crash frees them within the liveness TTL.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if #ARGV > 4 then
  local lapsed = {}
  for i = 5, #ARGV do lapsed[ARGV[i]] = true end
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
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
