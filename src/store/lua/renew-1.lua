-- renew: extend the run lease if it is still ours.
-- KEYS[1] lease (string)
-- ARGV[1] `<owner>:<fence>`  ARGV[2] ttl ms
-- Returns 1 if renewed, 0 if the lease is gone or another's.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
