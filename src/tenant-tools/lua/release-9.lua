-- release: the claimant of an offer gives the call back after a failed try (the service's HTTP caller: a timeout,
-- a non-2xx answer): offered again after `delay` with the next attempt, or failed with `error` after the last.
-- A call offered again owes its session a `tool_task.retried` event for the failed attempt, as one whose lease was
-- lost does (sweep-11.lua): the debt is recorded here, in the same write as the offer, with `failure` (the try's
-- failure, ARGV[4]) in the owed record only (never in the call's), and cleared once the event is written. The
-- releaser writes it at once; should it die first, the call's next claim or the next sweep does.
-- KEYS[1] offers  KEYS[2] calls  KEYS[3] leased  KEYS[4] ready  KEYS[5] deadline  KEYS[6] results  KEYS[7] done
-- KEYS[8] owed  KEYS[9] bytes (the error result's bytes count in the tenant's storage: includes/held-bytes.lua)
-- ARGV[1] offer id  ARGV[2] delay ms  ARGV[3] `is_error` text for a call out of attempts  ARGV[4] the try's failure
-- (`HTTP 500`, `timeout after 30000 ms`, …)
-- Ready and done times are of Redis's clock (includes/now.lua).
-- Returns {'retried', owed record JSON}, {'failed', record JSON}, or {refusal} (see includes/offer-check.lua).
--- @include "includes/held-bytes"
--- @include "includes/offer-check"
--- @include "includes/queue-key"
--- @include "../../store/lua/includes/now"
local call, rec = offer_check(KEYS[1], KEYS[2], ARGV[1])
if not call then return {rec} end
local now = now_ms()
redis.call('ZREM', KEYS[3], call)
if rec.attempt >= rec.max_attempts then
  rec.state = 'done'
  local result = cjson.encode({content = ARGV[3], is_error = true})
  hold_bytes(KEYS[9], rec, #result)
  local enc = cjson.encode(rec)
  redis.call('HSET', KEYS[2], call, enc)
  redis.call('ZREM', KEYS[5], call)
  redis.call('HSET', KEYS[6], call, result)
  redis.call('ZADD', KEYS[7], now, call)
  return {'failed', enc}
end
rec.state = 'queued'
rec.offer = ''
redis.call('HSET', KEYS[2], call, cjson.encode(rec))
redis.call('ZADD', KEYS[4], now + tonumber(ARGV[2]), rec.queue .. ' ' .. call)
redis.call('ZADD', queue_key(KEYS[4], rec.queue), now + tonumber(ARGV[2]), call)
rec.failure = ARGV[4]
local owed = cjson.encode(rec)
redis.call('HSET', KEYS[8], call .. ' ' .. rec.attempt, owed)
return {'retried', owed}
