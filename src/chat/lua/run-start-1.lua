-- run-start: where the current run of a session begins in its event log, for a chat stream resumed from the start
-- of the run (GET /v1/chat/:id/stream). Scans the log backwards from its newest entry for the newest
-- `session.status` event; the run is active when that event says `running`.
-- KEYS[1] events (stream)
-- ARGV[1] most entries scanned (>= 1)
-- Returns the id of the entry just before that `session.status` event ('0-0' when it is the oldest entry), or
-- false when the newest status is not `running` or no status event is within the scan.
local max = tonumber(ARGV[1])
local last = '+'
local seen = 0
while seen < max do
  local rows = redis.call('XREVRANGE', KEYS[1], last, '-', 'COUNT', math.min(64, max - seen))
  if #rows == 0 then return false end
  for _, row in ipairs(rows) do
    seen = seen + 1
    local fields = row[2]
    local t, d = nil, nil
    for i = 1, #fields, 2 do
      if fields[i] == 't' then t = fields[i + 1] elseif fields[i] == 'd' then d = fields[i + 1] end
    end
    if t == 'session.status' then
      local ok, data = pcall(cjson.decode, d or 'null')
      if not ok or type(data) ~= 'table' or data['status'] ~= 'running' then return false end
      local before = redis.call('XREVRANGE', KEYS[1], '(' .. row[1], '-', 'COUNT', 1)[1]
      return before and before[1] or '0-0'
    end
  end
  last = '(' .. rows[#rows][1]
end
return false
