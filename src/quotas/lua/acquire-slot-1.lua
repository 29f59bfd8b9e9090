-- acquire-slot: take one of a tenant's slots (open WebSockets) across replicas.
-- KEYS[1] the tenant's held slots (zset member `<replica>:<n>` -> expiry in ms since the epoch)
-- ARGV[1] now (ms)  ARGV[2] the new slot's expiry (ms)  ARGV[3] the most slots  ARGV[4] the member
-- Returns 1 when the slot was taken, 0 when `max` live slots are held already (nothing written but the drop of
-- expired slots). Expired slots (their replica died without releasing them) are dropped first, so a crash frees
-- its slots within one TTL.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
