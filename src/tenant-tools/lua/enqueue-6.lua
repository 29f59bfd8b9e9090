-- enqueue: queue one tool call for a worker, unless it was queued before (its record, kept a day after delivery,
-- is the tombstone that keeps a second run of the same step from queueing it again). A record that is settled
-- (delivered, or cancelled) says so: the call's round is over, and a step that still waits for the call (one rebuilt
-- from the history, a failed step resumed) queues it in its next round (src/engine/tool-tasks.ts).
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] ready  KEYS[4] deadline  KEYS[5] leased  KEYS[6] done
-- ARGV[1] call  ARGV[2] record (JSON; its `queued_at` and `deadline` are set here)  ARGV[3] input (JSON text)
-- ARGV[4] queue (the tool's name, or `~http`)  ARGV[5] most calls of the tenant in flight  ARGV[6] wake channel
-- (Also the queue's index, includes/queue-key.lua.) `queued_at` is now and `deadline` now + the record's `timeout_ms`,
-- of Redis's clock (includes/now.lua).
-- Returns 1 queued, 0 known already (still out: queued, leased, or its result not delivered yet), 2 known and settled,
-- -1 the tenant's queue is full.
-- A call known and still out counts the run waiting on it in its record's `wanted`: a cancel decided from an older
-- read of the session (settle-8.lua's ARGV[5]) is refused, so a run parked on the task is not left without it.
--- @include "includes/queue-key"
--- @include "../../store/lua/includes/now"
local known = redis.call('HGET', KEYS[1], ARGV[1])
if known then
  local rec = cjson.decode(known)
  if rec.state == 'delivered' or rec.state == 'cancelled' then return 2 end
  rec.wanted = (tonumber(rec.wanted) or 0) + 1
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
  return 0
end
local n = redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[5]) + redis.call('ZCARD', KEYS[6])
if n >= tonumber(ARGV[5]) then return -1 end
local now = now_ms()
local rec = cjson.decode(ARGV[2])
rec.queued_at = now
rec.deadline = now + tonumber(rec.timeout_ms)
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(rec))
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[3], now, ARGV[4] .. ' ' .. ARGV[1])
redis.call('ZADD', queue_key(KEYS[3], ARGV[4]), now, ARGV[1])
redis.call('ZADD', KEYS[4], rec.deadline, ARGV[1])
redis.call('PUBLISH', ARGV[6], ARGV[4])
return 1
