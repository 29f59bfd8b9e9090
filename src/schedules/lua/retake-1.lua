-- retake: takes over a pending fire whose claimer's lease is over (the claimer died, or its create failed), once
-- whatever the number of replicas sweeping it: the lease is renewed for the caller, so one replica retries the
-- fire per lease period.
-- KEYS[1] the schedule (hash)
-- ARGV[1] the pending fire's time (ms)  ARGV[2] now (ms)  ARGV[3] the new lease end (ms)
-- Returns 1 when the caller holds the fire now, 0 when the fire is not pending or its lease still runs.
local f = redis.call('HMGET', KEYS[1], 'pending', 'pending_until')
if f[1] ~= ARGV[1] then return 0 end
if tonumber(f[2] or '0') > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'pending_until', ARGV[3])
return 1
