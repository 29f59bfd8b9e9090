-- renew-slots: push the expiry of the slots one replica holds of one tenant (src/quotas/slots.ts, every third of
-- their TTL), those still there (a slot dropped meanwhile, its replica's liveness lapsed, is not taken again).
-- KEYS[1] the tenant's held slots (zset member `<replica>:<n>` -> expiry in ms of Redis's clock)
-- ARGV[1] how long they live from now (ms)  ARGV[2..] the members
-- Returns the number of slots renewed. The expiry is Redis's now (includes/now.lua) + ARGV[1], the clock
-- acquire-slot-1.lua compares it with; the key lives as long as its latest expiry.
--- @include "../../store/lua/includes/now"
local expiry = now_ms() + tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], expiry, ARGV[i])
    n = n + 1
  end
end
if n > 0 then redis.call('PEXPIREAT', KEYS[1], expiry) end
return n
