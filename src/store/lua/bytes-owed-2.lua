-- bytes-owed: settles one session delete's record of what its tenant's byte count is owed (TENANT_MAX_BYTES,
-- src/store/storage-quota.ts). A delete runs in the session's slot and the count is in the tenant's: so before its
-- script each delete records what it will give back under a field of its own (`<session id> <token>` →
-- `<bytes> <at ms>`), and after it settles that record here: paid (the count goes down, the record goes, in one step:
-- a second settle finds nothing) when its script removed the session, dropped otherwise. A delete killed in between
-- leaves its record to the tenant's next reconciliation, which pays it only if the session's `gone` key names its
-- token (destroy-9.lua wrote it), and drops it otherwise.
-- KEYS[1] the tenant's byte count (string)  KEYS[2] owed (hash)
-- ARGV[1] the record's field  ARGV[2] 'pay' | 'drop'
-- Returns the bytes given back (0 for none: no such record, or dropped).
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] ~= 'pay' then return 0 end
local n = tonumber(string.match(rec, '^(%d+)'))
redis.call('DECRBY', KEYS[1], n)
return n
