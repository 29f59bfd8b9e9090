-- retake: takes over a pending fire whose claimer's lease is over (the claimer died, or its create failed), once
-- whatever the number of replicas sweeping it: the lease is renewed for the caller, so one replica retries the
-- fire per lease period. The lease is of Redis's clock (includes/now.lua), as claim-2.lua set it: a replica whose
-- clock runs ahead does not take a live lease for over.
-- KEYS[1] the schedule (hash)
-- ARGV[1] the pending fire's time (ms)  ARGV[2] the new lease (ms from now)
-- Returns 1 when the caller holds the fire now, 0 when the fire is not pending or its lease still runs.
--- @include "../../store/lua/includes/now"
local f = redis.call('HMGET', KEYS[1], 'pending', 'pending_until')
if f[1] ~= ARGV[1] then return 0 end
local now = now_ms()
if tonumber(f[2] or '0') > now then return 0 end
redis.call('HSET', KEYS[1], 'pending_until', string.format('%d', now + tonumber(ARGV[2])))
return 1
