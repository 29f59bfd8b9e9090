-- run-slot-prune: drop slots of the tenant's active runs whose session was seen not running.
-- KEYS[1] the tenant's active runs (zset session id -> ms of Redis's clock when its slot was taken or last held)
-- ARGV[1], ARGV[2], ... session id, the score read with it, ...
-- A slot taken again since it was read (another score) is kept: its session may be starting now.
-- Returns the number of slots dropped.
local n = 0
for i = 1, #ARGV, 2 do
  local cur = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if cur and tonumber(cur) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    n = n + 1
  end
end
return n
