-- destroy: delete every key of a session but the event log, which keeps only a `session.deleted` event and
-- expires after ARGV[2] ms so live readers learn of the deletion. Its client tokens go with it (revoked at once).
-- The session's byte count (its `bytes` field, read here, so no write between a read and the delete is missed) is
-- returned and written with the delete's token into the `session.deleted` entry (fields `tok`, `b`): the tenant's
-- byte count is in another slot, and a delete killed before giving the bytes back leaves its owed record there
-- (src/store/storage-quota.ts), which the settle sweep pays only if this entry names its token.
-- KEYS[1] meta  KEYS[2] msgs  KEYS[3] iters  KEYS[4] queue  KEYS[5] events  KEYS[6] lease  KEYS[7] compacted
-- KEYS[8] client tokens (hash, src/store/client-tokens.ts)
-- ARGV[1] event data JSON  ARGV[2] ttl of the event log ms  ARGV[3] event notification channel
-- ARGV[4] the revision the session must still be at ('' : any; a swept delete never races a newer write)
-- ARGV[5] the delete's owed-record token ('' : none)  ARGV[6] deadline, Redis time ms ('' : none): past it, the
-- owed record may have been settled by the sweep already, so nothing is done
-- Returns {1, bytes}; {0, 0} if the session did not exist, {-1, 0} if it moved past ARGV[4], {-2, 0} past the
-- deadline (nothing written in the last three). A call whose token's `session.deleted` entry ends the log already
-- (the same call sent again) returns {1, bytes} again and writes nothing.
-- The first write is the DEL, which Redis never refuses for memory: with maxmemory reached (noeviction) a script
-- is refused only when its first write is one that may add memory, so a delete still runs when Redis is full.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- Sent again (a reply lost, the client resending on reconnect): answered as the first time, so the delete gives
  -- back what its token owes instead of dropping its record.
  local last = ARGV[5] and ARGV[5] ~= '' and redis.call('XREVRANGE', KEYS[5], '+', '-', 'COUNT', 1)[1]
  if last then
    local f = {}
    for i = 1, #last[2], 2 do f[last[2][i]] = last[2][i + 1] end
    if f.t == 'session.deleted' and f.tok == ARGV[5] then return {1, tonumber(f.b) or 0} end
  end
  return {0, 0}
end
if ARGV[6] and ARGV[6] ~= '' and now > tonumber(ARGV[6]) then return {-2, 0} end
local cur = redis.call('HMGET', KEYS[1], 'revision', 'bytes')
local rev_s = cur[1] or '0'
if ARGV[4] and ARGV[4] ~= '' and rev_s ~= ARGV[4] then return {-1, 0} end
local rev = tonumber(rev_s) + 1
local bytes = tonumber(cur[2] or '0') or 0
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8])
local id = redis.call('XADD', KEYS[5], '*', 't', 'session.deleted', 'd', ARGV[1], 'r', rev, 'at', tostring(now),
  'tok', ARGV[5] or '', 'b', bytes)
redis.call('PEXPIRE', KEYS[5], ARGV[2])
redis.call('PUBLISH', ARGV[3], id)
return {1, bytes}
