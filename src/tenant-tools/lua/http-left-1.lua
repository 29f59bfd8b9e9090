-- http-left: whether a tenant has calls of http tools queued (due now or later: a try waiting out its backoff).
-- KEYS[1] ready (ZSET `<queue> <call>`; at most TOOL_TASKS_MAX_PER_TENANT members, so the scan is bounded)
-- ARGV[1] none: the script takes no arguments
-- Returns 1 when some member is of the `~http` queue, else 0.
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if string.sub(m, 1, 6) == '~http ' then return 1 end
end
return 0
