-- heartbeat: renew the lease of an offer that still holds its call.
-- KEYS[1] offers  KEYS[2] calls  KEYS[3] leased
-- ARGV[1] offer id  ARGV[2] now ms  ARGV[3] lease ms
-- Returns {'ok', record JSON}, {'lost', record JSON} (the lease expired: not renewed; the record, so the caller can
-- tell whether the session still waits for the call), or {refusal}: 'unknown', 'lost' (offered again), 'completed',
-- 'cancelled'.
--- @include "includes/offer-check"
local call, rec = offer_check(KEYS[1], KEYS[2], ARGV[1])
if not call then return {rec} end
if rec.lease < tonumber(ARGV[2]) then return {'lost', cjson.encode(rec)} end
rec.lease = tonumber(ARGV[2]) + tonumber(ARGV[3])
local enc = cjson.encode(rec)
redis.call('HSET', KEYS[2], call, enc)
redis.call('ZADD', KEYS[3], rec.lease, call)
return {'ok', enc}
