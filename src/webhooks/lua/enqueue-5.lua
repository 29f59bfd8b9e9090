-- enqueue: put messages in one endpoint's outbox, each once, within its bounds in messages and in bytes.
-- KEYS[1] webhook (hash; `pending_bytes`: the payloads' bytes)  KEYS[2] due queue (zset msg -> due ms)
-- KEYS[3] payloads (hash msg -> body)  KEYS[4] attempts (hash msg -> "attempts:first attempt ms")
-- KEYS[5] settled (zset msg -> ms)
-- ARGV[1] most pending messages  ARGV[2] most pending bytes  ARGV[3..] msg id, body, msg id, body, ...
-- A message is due now of Redis's clock (includes/now.lua), the one claim-5.lua compares with.
-- Returns {added, dropped, waiting}, or {-1, 0, 0} when the webhook is gone or disabled (nothing written). A message
-- already pending or settled recently (a fan-out replayed after a crash) is skipped; `waiting` counts those still
-- pending (the process that added them may have died before it scheduled the endpoint: the caller schedules it).
--- @include "../../store/lua/includes/now"
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HGET', KEYS[1], 'disabled') == '1' then return {-1, 0, 0} end
local added, dropped, waiting = 0, 0, 0
local pending = redis.call('HLEN', KEYS[3])
local bytes = tonumber(redis.call('HGET', KEYS[1], 'pending_bytes') or '0')
local now = now_ms()
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if redis.call('HEXISTS', KEYS[3], id) == 1 then
    waiting = waiting + 1
  elseif not redis.call('ZSCORE', KEYS[5], id) then
    local size = #ARGV[i + 1]
    if pending >= tonumber(ARGV[1]) or bytes + size > tonumber(ARGV[2]) then
      dropped = dropped + 1
    else
      redis.call('HSET', KEYS[3], id, ARGV[i + 1])
      redis.call('HSET', KEYS[4], id, '0:0')
      redis.call('ZADD', KEYS[2], now, id)
      pending = pending + 1
      bytes = bytes + size
      added = added + 1
    end
  end
end
redis.call('HSET', KEYS[1], 'pending_bytes', bytes)
return {added, dropped, waiting}
