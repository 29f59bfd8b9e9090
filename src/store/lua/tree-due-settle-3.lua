-- tree-due-settle: moves or drops a member of a tenant's sub-agent due set only if its score is still the one the
-- agents' sweep read (a wake-up written during the look is never lost to the look's own next time), and keeps the
-- tenants' index at the tenant's earliest entry (none left: the tenant leaves the index) and the member's tenant in
-- the members' tenants while it is a member. The next time is ARGV[3] ms from now of Redis's clock (TIME, the clock
-- tree-due-read-1.lua reads by).
-- KEYS[1] the tenant's due set (zset)  KEYS[2] the tenants' index (zset)  KEYS[3] the members' tenants (hash)
-- ARGV[1] member  ARGV[2] the score read (as ZRANGEBYSCORE gave it)  ARGV[3] next in (ms from Redis's now), or ''
-- to drop it  ARGV[4] tenant
-- Returns 1 if moved or dropped, 0 if the score had changed (nothing written).
--- @include "includes/now"
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now_ms() + math.max(0, tonumber(ARGV[3])), ARGV[1])
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[1] then redis.call('ZADD', KEYS[2], head[2], ARGV[4]) else redis.call('ZREM', KEYS[2], ARGV[4]) end
return 1
