-- tree-due: sets a sub-agent tree member's due time in its tenant's due set, and keeps the tenants' index at each
-- tenant's earliest entry (what the agents' sweep reads first: src/store/tree-due.ts) and the member's tenant in the
-- members' tenants (what wakes a member whose session is gone, with its tenant: RunQueue.end). The due time is
-- ARGV[2] ms from now of Redis's clock (TIME to the microsecond, the clock tree-due-read-1.lua reads by), so a
-- wake-up's score differs from the score a look under way read, even in the same millisecond, and that look leaves
-- it (tree-due-settle-3.lua).
-- KEYS[1] the tenant's due set (zset: member → ms)  KEYS[2] the tenants' index (zset: tenant → its earliest ms)
-- KEYS[3] the members' tenants (hash: member → tenant)
-- ARGV[1] member  ARGV[2] due in (ms from Redis's now; 0: now)  ARGV[3] tenant
-- ARGV[4] '' (set), 'XX' (only a member: a wake-up), 'NX' (only a new member: one moved from the old set), 'LT'
-- (only a member, and only sooner than its due time: a safety net that must not put off a wake-up)
-- Returns 1 when the member's score was written, 0 when not (XX: not a member; NX: one already; LT: either, or it
-- was due sooner).
local t = redis.call('TIME')
local at = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 + math.max(0, tonumber(ARGV[2]))
-- Never the score it has (a write in the same microsecond): a look that read it would take this one for its own.
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if cur and tonumber(cur) == at then at = at + 0.001 end
local n
if ARGV[4] == '' then
  n = redis.call('ZADD', KEYS[1], 'CH', at, ARGV[1])
elseif ARGV[4] == 'LT' then
  n = redis.call('ZADD', KEYS[1], 'XX', 'LT', 'CH', at, ARGV[1])
else
  n = redis.call('ZADD', KEYS[1], ARGV[4], 'CH', at, ARGV[1])
end
if n == 0 then return 0 end
-- Also on a wake-up: a member written by tree-due-2.lua (the version before) has no entry there yet.
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[2], head[2], ARGV[3])
return 1
