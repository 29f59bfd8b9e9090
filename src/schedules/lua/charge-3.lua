-- charge: counts a schedule's create body in its tenant's storage before its record is written (charges.ts): the
-- tenant's ledger entry of the schedule raised to `bytes` and the tenant's count by as much, refused past the limit;
-- for a create, the tenant's index entry too, refused at SCHEDULES_MAX_PER_TENANT, counted and listed in one step (a
-- count read apart from the add let creates racing on several replicas all pass it: 96 held, 24 at once made 105).
-- Never lowers an entry: what a write gives back is settled after it (settle-2.lua).
-- KEYS[1] the tenant's storage count (t:{T}:bytes)  KEYS[2] the tenant's ledger (t:{T}:schedule_bytes)
-- KEYS[3] the tenant's schedules (ZSET, members `<created_ms padded>:<id>`, score 0)
-- ARGV[1] the schedule id  ARGV[2] the bytes its record is to keep ('' none: a delete's adoption, below)
-- ARGV[3] the most the count may reach ('' no limit): TENANT_MAX_BYTES less the tenant's tool tasks' bytes
-- ARGV[4] the bytes counted for a record written before the ledger ('' none): the entry's value when it has none,
-- adopted as it is (counted already)
-- ARGV[5] the index member ('' not a create)  ARGV[6] most schedules
-- Returns 1 (written), 0 at SCHEDULES_MAX_PER_TENANT, -1 past the byte limit (nothing written in both). An index
-- entry is listed already for the same keyed create sent twice in one millisecond. Entries without a record (a create
-- in flight, or one that died) count until a list drops them.
if ARGV[5] ~= '' and not redis.call('ZSCORE', KEYS[3], ARGV[5]) then
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then return 0 end
end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
local counted = tonumber(cur or (ARGV[4] ~= '' and ARGV[4]) or '0')
local grow = 0
if ARGV[2] ~= '' then grow = tonumber(ARGV[2]) - counted end
if grow > 0 and ARGV[3] ~= '' and tonumber(redis.call('GET', KEYS[1]) or '0') + grow > tonumber(ARGV[3]) then
  return -1
end
if ARGV[5] ~= '' then redis.call('ZADD', KEYS[3], 0, ARGV[5]) end
if grow > 0 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  redis.call('INCRBY', KEYS[1], grow)
elseif not cur and ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
else
  return 1
end
redis.call('HINCRBY', KEYS[2], 'seq', 1)
return 1
