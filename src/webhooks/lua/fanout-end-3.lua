-- fanout-end: move the session's fan-out cursor past the events whose deliveries are in the outboxes.
-- KEYS[1] fan-out state (hash)  KEYS[2] fan-out lease  KEYS[3] the session's event log
-- ARGV[1] owner  ARGV[2] new cursor  ARGV[3] tenant ('' keeps it)  ARGV[4] state TTL ms  ARGV[5] '1' releases the lease
-- The state outlives no expiring log (a deleted session's): it expires with it, so no key of the session is left.
-- Returns 1, or 0 (nothing written) when the lease is no longer ours: another process took over and re-reads from
-- the old cursor (the outboxes drop the duplicates).
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'c', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 't', ARGV[3]) end
local logTtl = redis.call('PTTL', KEYS[3])
if logTtl == -2 then logTtl = 1 end
if logTtl > 0 and logTtl < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[1], logTtl)
else
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
if ARGV[5] == '1' then redis.call('DEL', KEYS[2]) end
return 1
