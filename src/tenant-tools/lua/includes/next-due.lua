-- next_due: when a tenant's queue next needs a sweep.
-- Returns live, gc: the earliest lease expiry, deadline or undelivered result (ms; -1 when none: no call is queued,
-- leased or undelivered), 0 while a `tool_task.retried` event is owed (`owed`, sweep-11.lua), and the earliest
-- tombstone's gc time (ms; -1 when none).
local function next_due(leased, deadline, done, gc, owed)
  local live = -1
  if redis.call('EXISTS', owed) == 1 then live = 0 end
  for _, k in ipairs({leased, deadline, done}) do
    local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
    if first[2] then
      local at = tonumber(first[2])
      if live < 0 or at < live then live = at end
    end
  end
  local g = redis.call('ZRANGE', gc, 0, 0, 'WITHSCORES')
  return live, tonumber(g[2] or -1)
end
