-- acquire: take the run lease of a running session, and read what its run starts from.
-- KEYS[1] meta (hash)  KEYS[2] lease (string)  KEYS[3] queue (list)  KEYS[4] iters (list)
-- ARGV[1] owner id  ARGV[2] ttl ms
-- Returns 0 when the lease is held by someone else or the session is not `running`; else
-- { fence, meta (HGETALL, flat, after the fence was taken), queued follow-ups (LLEN), last iteration record or false }:
-- the fencing token (the session's `fence` field, incremented) and the session as the run finds it, in the claim's
-- round trip (the run reads only its history after this).
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
local last = redis.call('LINDEX', KEYS[4], -1)
return { fence, redis.call('HGETALL', KEYS[1]), redis.call('LLEN', KEYS[3]), last }
