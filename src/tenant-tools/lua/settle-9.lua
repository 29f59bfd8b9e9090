-- settle: a call is over for the queue: its result was delivered to its session, or the session no longer waits
-- for it (cancelled, deleted). Its record stays as a tombstone until the sweep's gc time; input and result go.
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] results  KEYS[4] ready  KEYS[5] leased  KEYS[6] deadline  KEYS[7] done  KEYS[8] gc
-- KEYS[9] bytes (the input's and result's bytes leave the tenant's storage with them: includes/held-bytes.lua; a
-- settle of a call settled already, or left as it is, gives nothing back)
-- ARGV[1] call  ARGV[2] state ('delivered' | 'cancelled')  ARGV[3] gc after (ms from now, Redis's clock:
-- src/store/lua/includes/now.lua)  ARGV[4] stop channel  ARGV[5] for a cancel decided from a read of the session: the record's
-- `wanted` as read before that read ('' : unconditional, as a cancelled or deleted session's dropTasks)
-- An http tool's call cancelled while leased has its offer id published on the stop channel: the replica running
-- that try aborts it now (src/tenant-tools/http-stops.ts), not at its next heartbeat. Nothing else is published.
-- A run that queued the call again since (enqueue-7.lua found it still out and counted it in `wanted`) waits for
-- it: the session was read before the run's write made it wait again, and the task is left as it is, unless a
-- cancel or delete settled it since (it stays settled).
-- An unconditional cancel (a session's drop of its step's tasks, from a read that may be older than a delivery)
-- leaves a call whose result was taken as it is: `delivered` stays so (its result is in the session), and `done` is
-- left to its delivery, under way (the worker's result request, or the sweep's), which settles it: delivered if the
-- session took the result before the drop's write, else cancelled, its worker told `task_cancelled`. Cancelled here,
-- its result gone from the outbox, the delivery would find nothing to deliver and answer the worker 200 for a result
-- the session never got.
-- Returns 2 when the task is left for such a run; else 1 when the call was known, 0 when it was not.
--- @include "includes/held-bytes"
--- @include "includes/queue-key"
--- @include "../../store/lua/includes/now"
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local rec = cjson.decode(raw)
local unconditional = ARGV[5] == nil or ARGV[5] == ''
if ARGV[2] == 'cancelled' and unconditional and (rec.state == 'done' or rec.state == 'delivered') then return 1 end
if ARGV[5] ~= nil and ARGV[5] ~= '' and ARGV[2] == 'cancelled' then
  -- Settled already (a cancel or delete dropped it since the read): it stays so, whatever `wanted` says.
  if rec.state == 'cancelled' or rec.state == 'delivered' then return 1 end
  if tostring(tonumber(rec.wanted) or 0) ~= ARGV[5] then return 2 end
end
if ARGV[2] == 'cancelled' and rec.state == 'leased' and rec.queue == '~http' and rec.offer ~= '' then
  redis.call('PUBLISH', ARGV[4], rec.offer)
end
redis.call('ZREM', KEYS[4], rec.queue .. ' ' .. ARGV[1])
redis.call('ZREM', queue_key(KEYS[4], rec.queue), ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
free_bytes(KEYS[9], rec)
rec.state = ARGV[2]
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
redis.call('ZADD', KEYS[8], now_ms() + tonumber(ARGV[3]), ARGV[1])
return 1
