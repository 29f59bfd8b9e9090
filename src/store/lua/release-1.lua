-- release: drop the run lease if it is still ours.
-- KEYS[1] lease (string)
-- ARGV[1] `<owner>:<fence>`
-- Returns 1 if released, 0 if the lease is gone or another's.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
