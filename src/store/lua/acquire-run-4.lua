-- acquire-run: take the run lease of a running session, and read what its run starts from, but its pending step.
-- KEYS[1] meta (hash)  KEYS[2] lease (string)  KEYS[3] queue (list)  KEYS[4] iters (list)
-- ARGV[1] owner id  ARGV[2] ttl ms
-- Returns 0 when the lease is held by someone else or the session is not `running`; else
-- { fence, meta (flat, after the fence was taken) without the step's fields, queued follow-ups (LLEN), last iteration
--   record or false, step (1 when `pending` holds a step, else 0) }:
-- the fencing token (the session's `fence` field, incremented) and the session as the run finds it, in the claim's
-- round trip (the run reads its history after this, and the step with it when `step` is 1: src/engine/run.ts).
-- The step's fields (`pending`: its calls, their inputs up to BODY_LIMIT each once edited at approval; `result:<id>`:
-- its results, up to MAX_TURN_BYTES together; `reported:<id>`) are neither read nor returned here: every value a
-- script reads is copied into its Lua, and this one runs at every run's start, while Redis serves no one else. The
-- field names alone are read (HKEYS: a few dozen, and one `result:` and `reported:` per pending call).
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('HGET', KEYS[1], 'status') ~= 'running' then return 0 end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
local names = {}
for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
  if k ~= 'pending' and string.sub(k, 1, 7) ~= 'result:' and string.sub(k, 1, 9) ~= 'reported:' then
    names[#names + 1] = k
  end
end
-- `status` and `fence` at least: never empty.
local values = redis.call('HMGET', KEYS[1], unpack(names))
local flat = {}
for i = 1, #names do
  if values[i] then
    flat[#flat + 1] = names[i]
    flat[#flat + 1] = values[i]
  end
end
local step = redis.call('HSTRLEN', KEYS[1], 'pending') > 0 and 1 or 0
return { fence, flat, redis.call('LLEN', KEYS[3]), redis.call('LINDEX', KEYS[4], -1), step }
