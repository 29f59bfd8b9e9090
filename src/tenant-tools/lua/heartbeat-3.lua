-- heartbeat: renew the lease of an offer that still holds its call.
-- KEYS[1] offers  KEYS[2] calls  KEYS[3] leased
-- ARGV[1] offer id  ARGV[2] lease ms
-- Returns {'ok', record JSON} (renewed until now + lease ms, now of Redis's clock: includes/now.lua), or {refusal}:
-- 'unknown', 'lost' (offered again), 'completed' (with the call's record JSON: {'completed', record}), 'cancelled'.
-- A lease past its expiry is renewed all the same while its offer still holds the call (the sweep has not offered
-- it again), as complete-7.lua takes a result then: a heartbeat refused in that window made a worker drop a tool
-- whose result would have been taken, and the call ran again. The sweep (sweep-11.lua) offers a call again only
-- when the lease stored in its record has lapsed, read in its own script: a renewal here, atomic like the sweep,
-- comes either before it (the sweep sees the new expiry and keeps the call leased) or after it (this offer no
-- longer holds the call: 'lost').
--- @include "includes/offer-check"
--- @include "../../store/lua/includes/now"
local call, rec, completed = offer_check(KEYS[1], KEYS[2], ARGV[1])
if not call then return {rec, completed} end
rec.lease = now_ms() + tonumber(ARGV[2])
local enc = cjson.encode(rec)
redis.call('HSET', KEYS[2], call, enc)
redis.call('ZADD', KEYS[3], rec.lease, call)
return {'ok', enc}
