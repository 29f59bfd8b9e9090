-- sweep: a tenant's queue, due: expired leases (offered again with the next attempt, or failed after the last),
-- calls past their deadline (failed), and tombstones past their gc time (gone, with their offers).
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] results  KEYS[4] ready  KEYS[5] leased  KEYS[6] deadline  KEYS[7] done
-- KEYS[8] gc  KEYS[9] offers  KEYS[10] owed  KEYS[11] bytes (a failed call's error result counts in the tenant's
-- storage until settled; a tombstone gone gives back what its record still holds: includes/held-bytes.lua)
-- ARGV[1] most entries handled per kind  ARGV[2] wake channel
-- Returns: now (ms, Redis's clock: includes/now.lua, the clock of every time compared here), then when the queue
-- next needs a sweep, live then gc (includes/next-due.lua: ms, -1 for none), then kind,
-- record (JSON) pairs: 'retried' (offered again) or 'failed' (its `is_error` result waits in `done`; one past its
-- deadline has `timed_out_at`, the sweep's now), then 'owed'
-- pairs: the records of the lost attempts whose `tool_task.retried` event is owed (those offered again by this
-- sweep among them).
-- A call offered again owes its session a `tool_task.retried` event, written by the caller in the session's slot,
-- so after this script: the debt is recorded here, in the same write as the offer (`owed`: `<call> <attempt>` →
-- the record as offered again), and cleared only once the event is written. A sweeper killed between the two
-- leaves it for the next claim of the call (claim-6.lua hands it out before `tool.started`) or the next sweep on any
-- replica; the session's write is once per attempt whoever makes it (src/store/lua/tool-retried-2.lua).
--- @include "includes/held-bytes"
--- @include "includes/next-due"
--- @include "includes/queue-key"
--- @include "../../store/lua/includes/now"
local now = now_ms()
local limit = tonumber(ARGV[1])
local out = {}
local function fail(call, rec, text)
  rec.state = 'done'
  local result = cjson.encode({content = text, is_error = true})
  hold_bytes(KEYS[11], rec, #result)
  redis.call('HSET', KEYS[1], call, cjson.encode(rec))
  redis.call('HSET', KEYS[3], call, result)
  redis.call('ZADD', KEYS[7], now, call)
  out[#out + 1] = 'failed'
  out[#out + 1] = cjson.encode(rec)
end
for _, call in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[5], call)
  local raw = redis.call('HGET', KEYS[1], call)
  if raw then
    local rec = cjson.decode(raw)
    if rec.state == 'leased' and rec.lease <= now then
      if rec.attempt >= rec.max_attempts then
        redis.call('ZREM', KEYS[6], call)
        -- The last offer lost its lease as the others did: offer_check answers its worker 'lost' (the offer no
        -- longer holds the call), and the service, finding the call settled with no offer, tells it
        -- task_already_completed `attempts_exhausted` (src/tenant-tools/service.ts settledRefusal).
        rec.offer = ''
        fail(call, rec, 'Error: no worker answered: the lease of each of its ' .. rec.attempt ..
          ' attempts expired (max_attempts ' .. rec.max_attempts .. ')')
      else
        rec.state = 'queued'
        rec.offer = ''
        local enc = cjson.encode(rec)
        redis.call('HSET', KEYS[1], call, enc)
        redis.call('HSET', KEYS[10], call .. ' ' .. rec.attempt, enc)
        redis.call('ZADD', KEYS[4], rec.queued_at, rec.queue .. ' ' .. call)
        redis.call('ZADD', queue_key(KEYS[4], rec.queue), rec.queued_at, call)
        redis.call('PUBLISH', ARGV[2], rec.queue)
        out[#out + 1] = 'retried'
        out[#out + 1] = enc
      end
    elseif rec.state == 'leased' then
      redis.call('ZADD', KEYS[5], rec.lease, call)
    end
  end
end
for _, call in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[6], call)
  local raw = redis.call('HGET', KEYS[1], call)
  if raw then
    local rec = cjson.decode(raw)
    if rec.state == 'queued' or rec.state == 'leased' then
      redis.call('ZREM', KEYS[4], rec.queue .. ' ' .. call)
      redis.call('ZREM', queue_key(KEYS[4], rec.queue), call)
      redis.call('ZREM', KEYS[5], call)
      -- A worker still holding the call is told it timed out (not that a result was taken: src/tenant-tools/service.ts).
      rec.timed_out_at = now
      fail(call, rec, 'Error: no worker answered within ' .. rec.timeout_ms .. ' ms (the tool\'s timeout_ms)')
    end
  end
end
for _, call in ipairs(redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[8], call)
  local raw = redis.call('HGET', KEYS[1], call)
  if raw then
    local rec = cjson.decode(raw)
    for offer in string.gmatch(rec.offers, '%S+') do redis.call('HDEL', KEYS[9], offer) end
    -- Nothing, once settled (settle-9.lua zeroed it); what a settle of an older replica left counted, else.
    free_bytes(KEYS[11], rec)
    redis.call('HDEL', KEYS[1], call)
    redis.call('HDEL', KEYS[2], call)
    redis.call('HDEL', KEYS[3], call)
  end
end
-- The debts still open: small (an entry lives from a lost lease until its event is written), so one HSCAN page holds
-- them all but for a backlog, which later sweeps take on.
local owed = redis.call('HSCAN', KEYS[10], 0, 'COUNT', limit)[2]
for i = 2, #owed, 2 do
  out[#out + 1] = 'owed'
  out[#out + 1] = owed[i]
end
local live, gc = next_due(KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[10])
table.insert(out, 1, gc)
table.insert(out, 1, live)
table.insert(out, 1, now)
return out
