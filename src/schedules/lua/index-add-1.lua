-- index-add: lists a new schedule in its tenant's index unless the tenant has SCHEDULES_MAX_PER_TENANT already, in
-- one step: a count read apart from the add let creates racing on several replicas all pass it (96 held, 24 at once
-- made 105).
-- KEYS[1] the tenant's schedules (ZSET, members `<created_ms padded>:<id>`, score 0)
-- ARGV[1] the member  ARGV[2] most schedules
-- Returns 1 when listed (or listed already: the same keyed create sent twice in one millisecond), 0 at the limit
-- (nothing written). Entries without a record (a create in flight, or one that died) count until a list drops them.
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], 0, ARGV[1])
return 1
