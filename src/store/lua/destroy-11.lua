-- destroy: delete every key of a session but the event log, which keeps only a `session.deleted` event and
-- expires after ARGV[2] ms so live readers learn of the deletion. Its client tokens go with it (revoked at once), and
-- the segments kept in keys of their own.
-- KEYS[1] meta  KEYS[2] msgs  KEYS[3] iters  KEYS[4] queue  KEYS[5] events  KEYS[6] lease  KEYS[7] compacted
-- KEYS[8] client tokens (hash, src/store/client-tokens.ts)  KEYS[9] the deleted session's tenant (string, written here)
-- KEYS[10] the prefix of the session's segment keys (keys.ts `segment`, not a key itself: given as one so that its
--          name carries the key prefix and the session's hash slot)
-- KEYS[11] the session's bytes to give back (hash, keys.ts `giveBack`, written here)
-- ARGV[1] event data JSON  ARGV[2] ttl of the event log ms  ARGV[3] event notification channel
-- ARGV[4] the revision the session must still be at ('' : any; a swept delete never races a newer write)
-- ARGV[5] the session's tenant
-- ARGV[6] ttl of KEYS[11] ms (storage-quota.ts GIVE_BACK_TTL_MS)
-- KEYS[9] says whose the log is while it is kept (the meta hash that said so is gone): a follower of that tenant
-- resuming with a cursor reads the rest of the log, its `session.deleted` last; anyone else is still told 404.
-- It expires with the log.
-- The segment keys (apply-8.lua `compact`: each `KEYS[10] .. <suffix>`, the suffixes listed in the meta field
-- `seg_keys`) are deleted here, with the rest: learnt from the meta hash as it is deleted, so a compaction that landed
-- just before is not missed, and none is left by a process that dies after this script (they have no expiry, and no
-- reader reaches them once the stubs naming them are gone). Their names are derived from KEYS[10], in its slot.
-- KEYS[11] keeps what the delete owes its tenant's storage count (`t:{tenant}:bytes`, another slot: given back after
-- this script, storage-give-back-2.lua): field the id of its `session.deleted` event (the delete's own name, and its
-- time), value `<bytes>:<tenant>` (its TypeScript side: storage-quota.ts `encodeGiveBack`/`decodeGiveBack`); none
-- when `bytes` is 0. The store gives it back and drops the field; a process killed between leaves it to any
-- replica's sweep of the delete's mark (SessionIndex `sweepDeletes`). A hash: a deterministic id made again and
-- deleted again before that sweep adds its own field, not over the first's.
-- Returns {code, bytes, deleted}: code 1, 0 if the session did not exist, or -1 if it moved past ARGV[4] (nothing
-- written in both); `bytes` the session's `bytes` (what its tenant's count holds of it) as the delete found it, 0
-- unless code is 1; `deleted` (code 1 only) the id of the `session.deleted` event, its field in KEYS[11]. `bytes` is
-- read here, not before the script: a write between (a client token's revoke gives bytes back) would otherwise be
-- given back twice.
-- The first write is the DEL, which Redis never refuses for memory: with maxmemory reached (noeviction) a script
-- is refused only when its first write is one that may add memory, so a delete still runs when Redis is full.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
local cur = redis.call('HGET', KEYS[1], 'revision') or '0'
if ARGV[4] and ARGV[4] ~= '' and cur ~= ARGV[4] then return {-1, 0} end
local raw = redis.call('HGET', KEYS[1], 'bytes') or '0'
local bytes = tonumber(raw) or 0
local seg_keys = redis.call('HGET', KEYS[1], 'seg_keys') or ''
local rev = tonumber(cur) + 1
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8])
for suffix in string.gmatch(seg_keys, '[%w_-]+') do redis.call('DEL', KEYS[10] .. suffix) end
local t = redis.call('TIME')
local now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local id = redis.call('XADD', KEYS[5], '*', 't', 'session.deleted', 'd', ARGV[1], 'r', rev, 'at', now)
redis.call('PEXPIRE', KEYS[5], ARGV[2])
redis.call('SET', KEYS[9], ARGV[5], 'PX', ARGV[2])
if bytes ~= 0 then
  redis.call('HSET', KEYS[11], id, raw .. ':' .. ARGV[5])
  redis.call('PEXPIRE', KEYS[11], ARGV[6])
end
redis.call('PUBLISH', ARGV[3], id)
return {1, bytes, id}
