-- delete: deletes a schedule's record and runs list if it belongs to the tenant and is at the expected revision;
-- its event log gets a `schedule.deleted` event and expires after ARGV[5] ms, so live readers and webhooks learn
-- of the deletion (as a session's, store/lua/destroy-11.lua).
-- KEYS[1] the schedule (hash)  KEYS[2] its event log (stream)  KEYS[3] its runs (zset)
-- KEYS[4] its webhooks' fan-out state (hash, src/webhooks/keys.ts `fanoutState`): its tenant (`t`) is written here,
-- expiring with the log, as fanout-end-3.lua keeps it. The fan-out learns a log's tenant from the hash deleted here,
-- else from that state, which has it only once a fan-out of the log ran: a webhook listening only for
-- `schedule.deleted` marks nothing before it, and a replica killed after this delete, before its own fan-out, left
-- the survivor's sweep of its mark no tenant, so the event was dropped (src/webhooks/fanout.ts).
-- ARGV[1] tenant  ARGV[2] expected revision ('' any)  ARGV[3] now (ms)  ARGV[4] event data (JSON)
-- ARGV[5] how long the event log is kept (ms)  ARGV[6] pub/sub channel  ARGV[7] notice size limit
-- Returns {1, the event's revision}, {0, 0} when there is no such schedule of the tenant, {-1, current} on a
-- mismatch (nothing written in both).
-- The first write is the DEL, which Redis never refuses for memory (noeviction refuses a script whose first write
-- may add memory), so a delete still runs when Redis is full.
--- @include "../../store/lua/includes/notice"
local f = redis.call('HMGET', KEYS[1], 'tenant', 'revision')
if f[1] ~= ARGV[1] then return {0, 0} end
if ARGV[2] ~= '' and ARGV[2] ~= f[2] then return {-1, tonumber(f[2])} end
-- The log's newest id from the schedule's record of it (`ev_last`), read before the record goes with the hash.
notice_before(KEYS[2], KEYS[1])
redis.call('DEL', KEYS[1], KEYS[3])
local rev = tostring(tonumber(f[2] or '1') + 1)
local t = 'schedule.deleted'
local id = redis.call('XADD', KEYS[2], '*', 't', t, 'd', ARGV[4], 'r', rev, 'at', ARGV[3])
notice_add(tonumber(ARGV[7]), id, t, ARGV[3], rev, ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('HSET', KEYS[4], 't', ARGV[1])
redis.call('PEXPIRE', KEYS[4], ARGV[5])
notice_publish(ARGV[6])
return {1, tonumber(rev)}
