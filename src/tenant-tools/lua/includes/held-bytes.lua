--- The bytes a call's task holds for its tenant (its input's copy, its result once it has one), counted in the
--- tenant's TENANT_MAX_BYTES (src/store/storage-quota.ts) through `tt:{tt:T}:bytes`, the sum of the `bytes` field of
--- the tenant's records. Both are written by the script that writes or deletes those copies, atomically with them, so
--- no replica dying between two commands can leave the count off, and the counter lives in the queue's slot (a
--- Redis Cluster runs each of these scripts on one slot). A settle (or the tombstone's gc) gives back exactly what
--- the record says it holds and zeroes it in the same write: settling twice, or settle then gc, gives nothing back
--- twice; a record without `bytes` (queued before this count existed, or by an older replica) gives back nothing.

--- `n` more bytes (a copy the script writes) held by `rec`'s call: counted in the record (which the caller writes
--- back) and in the tenant's counter.
local function hold_bytes(counter, rec, n)
  if n <= 0 then return end
  rec.bytes = (tonumber(rec.bytes) or 0) + n
  redis.call('INCRBY', counter, n)
end

--- `rec`'s call holds nothing any more (its input and result are deleted by the caller, which writes the record
--- back): its bytes leave the tenant's counter, which is deleted at 0 (an idle tenant keeps no key).
local function free_bytes(counter, rec)
  local n = tonumber(rec.bytes) or 0
  rec.bytes = nil
  if n > 0 and redis.call('INCRBY', counter, -n) <= 0 then redis.call('DEL', counter) end
end
