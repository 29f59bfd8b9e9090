-- enqueue: put messages in one endpoint's outbox, each once, within its bounds in messages and in bytes.
-- KEYS[1] webhook (hash; `pending_bytes`: the payloads' bytes)  KEYS[2] due queue (zset msg -> due ms)
-- KEYS[3] payloads (hash msg -> body)  KEYS[4] attempts (hash msg -> "attempts:first attempt ms")
-- KEYS[5] settled (zset msg -> ms)
-- ARGV[1] now ms  ARGV[2] most pending messages  ARGV[3] most pending bytes  ARGV[4..] msg id, body, msg id, body, ...
-- Returns {added, dropped, waiting}, or {-1, 0, 0} when the webhook is gone or disabled (nothing written). A message
-- already pending or settled recently (a fan-out replayed after a crash) is skipped; `waiting` counts those still
-- pending (the process that added them may have died before it scheduled the endpoint: the caller schedules it).
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'disabled') == '1' then return {-1, 0, 0} end
local added, dropped, waiting = 0, 0, 0
local pending = redis.call('HLEN', KEYS[3])
local bytes = tonumber(redis.call('HGET', KEYS[1], 'pending_bytes') or '0')
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HEXISTS', KEYS[3], id) == 1 then
    waiting = waiting + 1
  elseif not redis.call('ZSCORE', KEYS[5], id) then
    local size = #ARGV[i + 1]
    if pending >= tonumber(ARGV[2]) or bytes + size > tonumber(ARGV[3]) then
      dropped = dropped + 1
    else
      redis.call('HSET', KEYS[3], id, ARGV[i + 1])
      redis.call('HSET', KEYS[4], id, '0:0')
      redis.call('ZADD', KEYS[2], ARGV[1], id)
      pending = pending + 1
      bytes = bytes + size
      added = added + 1
    end
  end
end
redis.call('HSET', KEYS[1], 'pending_bytes', bytes)
return {added, dropped, waiting}
