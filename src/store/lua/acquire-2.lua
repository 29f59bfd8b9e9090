-- acquire: take the run lease of a running session.
-- KEYS[1] meta (hash)  KEYS[2] lease (string)
-- ARGV[1] owner id  ARGV[2] ttl ms
-- Returns the new fencing token (the session's `fence` field, incremented), or 0 when the lease is held by
-- someone else or the session is not `running`.
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return fence
