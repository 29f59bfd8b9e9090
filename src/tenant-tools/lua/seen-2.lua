-- seen: a worker claimed or heartbeated for some tools now. Only names of the tenant's tools are kept (a claim may
-- name up to 64 of any kind), entries last seen before `since` go, and of the rest at most `cap` stay (the newest),
-- so the set `GET /v1/tools` reads is bounded whatever the names and worker ids claims bring.
-- KEYS[1] the tenant's tools (HASH name -> definition)  KEYS[2] workers (ZSET `<tool> <worker_id>` -> ms)
-- ARGV[1] worker id  ARGV[2] seen how long ago (ms; 0: now)  ARGV[3] keep (ms: entries older go)  ARGV[4] cap
-- ARGV[5..] tool names
-- Returns the number of tools recorded. Times are of Redis's clock (includes/now.lua), as workers-1.lua reads them.
--- @include "../../store/lua/includes/now"
local now = now_ms()
local n = 0
for i = 5, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[2], now - tonumber(ARGV[2]), ARGV[i] .. ' ' .. ARGV[1])
    n = n + 1
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - tonumber(ARGV[3])))
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[4]) + 1))
return n
