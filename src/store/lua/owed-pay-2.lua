-- owed-pay: settles a session delete's owed record by giving its bytes back to the tenant's count, once: whoever
-- settles the token first (the deleting process, or the settle sweep after a kill) removes the record and pays;
-- anyone after finds no record and pays nothing.
-- KEYS[1] the tenant's owed records (hash)  KEYS[2] the tenant's byte count (string, TENANT_MAX_BYTES)
-- ARGV[1] the delete's token  ARGV[2] the bytes the delete's script removed
-- Returns 1 when this call paid, 0 when the record was settled already (or never written).
-- The first write is the HDEL, never refused for memory, and a DECRBY of an existing count adds none.
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local n = tonumber(ARGV[2])
if n ~= 0 then redis.call('DECRBY', KEYS[2], n) end
return 1
