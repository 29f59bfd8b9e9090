-- owed-add: records, in the tenant's slot, what a session delete will owe the tenant's byte count
-- (src/store/storage-quota.ts), before the delete's script runs: the token names the delete, the time (Redis's
-- clock) lets the settle sweep leave a record younger than its grace to the delete still under way.
-- KEYS[1] the tenant's owed records (hash: token -> JSON {id, at})
-- ARGV[1] the delete's token  ARGV[2] the session id
-- Returns the record's time (ms, Redis time).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({ id = ARGV[2], at = now }))
return now
