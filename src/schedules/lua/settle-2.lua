-- settle: sets the tenant's ledger entry of a schedule to the bytes its record keeps now, and the tenant's storage
-- count with it (charges.ts): bytes a shrinking PATCH or a delete gives back, a charge whose write was refused or
-- never came (its process killed) taken back, a charge a settle took back before the write landed counted again. It
-- sets, it does not add: settled twice, or by two processes, the count is the same. Guarded by the ledger's `seq` as
-- read before the record was: a settle whose read of the record is older than another write of the ledger (a charge,
-- a settle) writes nothing, so an older size is never put back over a newer one; the caller reads both again.
-- KEYS[1] the tenant's storage count (t:{T}:bytes)  KEYS[2] the tenant's ledger (t:{T}:schedule_bytes)
-- ARGV[1] the schedule id  ARGV[2] the ledger's `seq` read before the record ('' none)
-- ARGV[3] the bytes the record keeps ('' no record of the tenant: the entry goes)
-- ARGV[4] the bytes counted for a record written before the ledger ('' none): the entry's value when it has none
-- Returns 1 when settled, 0 when the ledger changed since `seq` was read (nothing written).
-- A delete's settle first drops the entry, which Redis never refuses for memory (noeviction refuses a script whose
-- first write may add), so bytes are given back on a full Redis too.
if (redis.call('HGET', KEYS[2], 'seq') or '') ~= ARGV[2] then return 0 end
local cur = redis.call('HGET', KEYS[2], ARGV[1])
local counted = tonumber(cur or (ARGV[4] ~= '' and ARGV[4]) or '0')
local keeps = 0
if ARGV[3] == '' then
  if cur then redis.call('HDEL', KEYS[2], ARGV[1]) end
else
  keeps = tonumber(ARGV[3])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
end
if keeps ~= counted then redis.call('INCRBY', KEYS[1], keeps - counted) end
redis.call('HINCRBY', KEYS[2], 'seq', 1)
return 1
