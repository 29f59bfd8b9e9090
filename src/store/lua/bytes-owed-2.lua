-- bytes-owed: settles a session delete's debt to its tenant's byte count (TENANT_MAX_BYTES, src/store/storage-quota.ts).
-- A delete runs in the session's slot and the count is in the tenant's: so before its script the delete records what
-- it will give back (`owed`: session id → `<token> <bytes> <at ms>`, HSETNX), and after it settles the record here:
-- paid (the count goes down, the record goes, one atomic step: a second settle finds nothing) once the session is
-- gone, dropped when the delete did not happen. A delete killed in between leaves the record to the tenant's next
-- quota check (`StorageQuota.read`), which pays it when the session is gone.
-- KEYS[1] the tenant's byte count (string)  KEYS[2] owed (hash)
-- ARGV[1] session id  ARGV[2] 'pay' | 'drop'  ARGV[3] the record's token ('': whichever record is there)
-- Returns the bytes given back (0 for none: no record, another token's, or dropped).
local rec = redis.call('HGET', KEYS[2], ARGV[1])
if not rec then return 0 end
local sp = string.find(rec, ' ', 1, true)
if ARGV[3] ~= '' and string.sub(rec, 1, sp - 1) ~= ARGV[3] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
if ARGV[2] ~= 'pay' then return 0 end
local n = tonumber(string.match(rec, '^%S+ (%d+)'))
redis.call('DECRBY', KEYS[1], n)
return n
