-- complete: a worker's result for the offer that holds the call (a lease past its expiry still holds it until the
-- sweep offers the call again). The result waits in `done` until it is delivered to its session.
-- KEYS[1] offers  KEYS[2] calls  KEYS[3] leased  KEYS[4] deadline  KEYS[5] results  KEYS[6] done  KEYS[7] bytes
-- ARGV[1] offer id  ARGV[2] result (JSON text)
-- The result's `done` score is Redis's clock (includes/now.lua), as the sweep compares it.
-- Returns {'ok', record JSON} or {refusal}: 'unknown', 'lost', 'completed' (with the call's record JSON:
-- {'completed', record}), 'cancelled'.
-- The result's bytes count in the tenant's storage until the call is settled (includes/held-bytes.lua); a leased call
-- has no result yet (one is written only as a call leaves `leased` or `queued` for `done`), so none is replaced.
--- @include "includes/held-bytes"
--- @include "includes/offer-check"
--- @include "../../store/lua/includes/now"
local call, rec, completed = offer_check(KEYS[1], KEYS[2], ARGV[1])
if not call then return {rec, completed} end
rec.state = 'done'
hold_bytes(KEYS[7], rec, #ARGV[2])
local enc = cjson.encode(rec)
redis.call('HSET', KEYS[2], call, enc)
redis.call('HSET', KEYS[5], call, ARGV[2])
redis.call('ZREM', KEYS[3], call)
redis.call('ZREM', KEYS[4], call)
redis.call('ZADD', KEYS[6], now_ms(), call)
return {'ok', enc}
