-- enqueue: queue tool calls of one tenant for its workers (a tool step's calls, all at once), each unless it was
-- queued before (its record, kept a day after delivery, is the tombstone that keeps a second run of the same step
-- from queueing it again). A record that is settled (delivered, or cancelled) says so: the call's round is over, and
-- a step that still waits for the call (one rebuilt from the history, a failed step resumed) queues it in its next
-- round (src/engine/tool-tasks.ts).
-- The wakes are published after every call is written: a claim woken by the first finds them all (up to its
-- `max`), where calls queued one script each woke it to find the first alone.
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] ready  KEYS[4] deadline  KEYS[5] leased  KEYS[6] done  KEYS[7] bytes
-- ARGV[1] most calls of the tenant in flight  ARGV[2] wake channel
-- ARGV[3..] quadruples, one per call: call, record (JSON; its `queued_at` and `deadline` are set here), input (JSON
-- text), queue (the tool's name, or `~http`)
-- (Also the queue's index, includes/queue-key.lua.) `queued_at` is now and `deadline` now + the record's `timeout_ms`,
-- of Redis's clock (includes/now.lua).
-- Returns, per call in order: 1 queued, 0 known already (still out: queued, leased, or its result not delivered yet),
-- 2 known and settled, -1 the tenant's queue is full.
-- A call known and still out counts the run waiting on it in its record's `wanted`: a cancel decided from an older
-- read of the session (settle-9.lua's ARGV[5]) is refused, so a run parked on the task is not left without it.
-- A call queued counts its input's bytes in the tenant's storage (includes/held-bytes.lua), never refused for them:
-- the calls are a run's own write (its tool step), as its commits are.
--- @include "includes/held-bytes"
--- @include "includes/queue-key"
--- @include "../../store/lua/includes/now"
local max = tonumber(ARGV[1])
local now = now_ms()
local out = {}
local woken = {}
local n = nil
for i = 3, #ARGV, 4 do
  local call, queue = ARGV[i], ARGV[i + 3]
  local known = redis.call('HGET', KEYS[1], call)
  if known then
    local rec = cjson.decode(known)
    if rec.state == 'delivered' or rec.state == 'cancelled' then
      out[#out + 1] = 2
    else
      rec.wanted = (tonumber(rec.wanted) or 0) + 1
      redis.call('HSET', KEYS[1], call, cjson.encode(rec))
      out[#out + 1] = 0
    end
  else
    n = n or (redis.call('ZCARD', KEYS[3]) + redis.call('ZCARD', KEYS[5]) + redis.call('ZCARD', KEYS[6]))
    if n >= max then
      out[#out + 1] = -1
    else
      local rec = cjson.decode(ARGV[i + 1])
      rec.queued_at = now
      rec.deadline = now + tonumber(rec.timeout_ms)
      hold_bytes(KEYS[7], rec, #ARGV[i + 2])
      redis.call('HSET', KEYS[1], call, cjson.encode(rec))
      redis.call('HSET', KEYS[2], call, ARGV[i + 2])
      redis.call('ZADD', KEYS[3], now, queue .. ' ' .. call)
      redis.call('ZADD', queue_key(KEYS[3], queue), now, call)
      redis.call('ZADD', KEYS[4], rec.deadline, call)
      n = n + 1
      woken[#woken + 1] = queue
      out[#out + 1] = 1
    end
  end
end
-- One message per call queued, as each wakes one claim of its tool per replica (src/tenant-tools/wake.ts).
for _, queue in ipairs(woken) do redis.call('PUBLISH', ARGV[2], queue) end
return out
