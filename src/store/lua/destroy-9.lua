-- destroy: delete every key of a session but the event log, which keeps only a `session.deleted` event and
-- expires after ARGV[2] ms so live readers learn of the deletion. Its client tokens go with it (revoked at once).
-- KEYS[1] meta  KEYS[2] msgs  KEYS[3] iters  KEYS[4] queue  KEYS[5] events  KEYS[6] lease  KEYS[7] compacted
-- KEYS[8] client tokens (hash, src/store/client-tokens.ts)  KEYS[9] the deleted session's tenant (string, written here)
-- ARGV[1] event data JSON  ARGV[2] ttl of the event log ms  ARGV[3] event notification channel
-- ARGV[4] the revision the session must still be at ('' : any; a swept delete never races a newer write)
-- ARGV[5] the session's tenant
-- KEYS[9] says whose the log is while it is kept (the meta hash that said so is gone): a follower of that tenant
-- resuming with a cursor reads the rest of the log, its `session.deleted` last; anyone else is still told 404.
-- It expires with the log.
-- Returns {code, bytes, seg_keys}: code 1, 0 if the session did not exist, or -1 if it moved past ARGV[4] (nothing
-- written in both); `bytes` the session's `bytes` (what its tenant's count holds of it) as the delete found it, 0
-- unless code is 1; `seg_keys` the meta field naming the segments kept in keys of their own (apply-8.lua `compact`),
-- which the caller deletes after this ('' when none): their names are in no KEYS here. `bytes` is read here, not
-- before the script: a write between (a client token's revoke gives bytes back) would otherwise be given back twice.
-- `seg_keys` likewise: a compaction landing between a read and this delete would leave its segment's key behind.
-- The first write is the DEL, which Redis never refuses for memory: with maxmemory reached (noeviction) a script
-- is refused only when its first write is one that may add memory, so a delete still runs when Redis is full.
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, ''} end
local cur = redis.call('HGET', KEYS[1], 'revision') or '0'
if ARGV[4] and ARGV[4] ~= '' and cur ~= ARGV[4] then return {-1, 0, ''} end
local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0') or 0
local seg_keys = redis.call('HGET', KEYS[1], 'seg_keys') or ''
local rev = tonumber(cur) + 1
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8])
local t = redis.call('TIME')
local now = tostring(tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local id = redis.call('XADD', KEYS[5], '*', 't', 'session.deleted', 'd', ARGV[1], 'r', rev, 'at', now)
redis.call('PEXPIRE', KEYS[5], ARGV[2])
redis.call('SET', KEYS[9], ARGV[5], 'PX', ARGV[2])
redis.call('PUBLISH', ARGV[3], id)
return {1, bytes, seg_keys}
