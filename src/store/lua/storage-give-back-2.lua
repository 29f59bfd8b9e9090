-- storage-give-back: a deleted session's bytes off its tenant's storage count, once per delete, whoever gives them
-- back (the deleting process, or any replica's sweep of the delete's mark after that process died: storage-quota.ts
-- `giveBack`). In the tenant's slot; the delete's record of them (destroy-11.lua, keys.ts `giveBack`) is in the
-- session's.
-- KEYS[1] the tenant's storage count `t:{tenant}:bytes`  KEYS[2] the deletes given back `t:{tenant}:given` (zset,
--         member the delete's name, score its time)
-- ARGV[1] the delete's name (`<session id>/<id of its session.deleted event>`)  ARGV[2] the bytes
-- ARGV[3] the delete's time (ms: its event id's, of the session's node's clock)
-- ARGV[4] how long KEYS[2] keeps a delete (ms, storage-quota.ts GIVEN_KEEP_MS; the same for every call)
-- Returns 1 when given back; 0 when that delete's were given back already; -1 when the delete is older than ARGV[4]
-- (its member may have been trimmed: nothing is given back, the count stays high, its upper bound kept).
-- Members older than ARGV[4] are trimmed, at most 64 a call (each call adds one: the set never lags); a delete that
-- old is refused by the same rule, so a trimmed member's give-back never runs again. The set expires ARGV[4] * 2
-- after its last give-back (a tenant that deletes nothing more keeps none).
--- @include "includes/now"
local now = now_ms()
local keep = tonumber(ARGV[4])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - keep), 'LIMIT', 0, 64)
if #old > 0 then redis.call('ZREM', KEYS[2], unpack(old)) end
if tonumber(ARGV[3]) < now - keep then return -1 end
if redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[1]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[2], keep * 2)
redis.call('DECRBY', KEYS[1], ARGV[2])
return 1
