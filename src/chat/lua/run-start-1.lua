-- run-start: where the assistant message of a session's current run begins in its event log, for a chat stream
-- resumed from its start (GET /v1/chat/:id/stream). Scans the log backwards from its newest entry: the newest
-- `session.status` event must say `running` (else no run is active); before it, runs that paused for the client
-- (`requires_action`, then `running` again once it answered) belong to the same assistant message, so the scan goes
-- on through them, to the `running` that followed an `idle` or `failed` one (or the oldest one within the scan).
-- A run that waits only for its sub-agents is still active (the service answers them and the run goes on): the caller,
-- which can tell such a pause from the session's state (this script cannot: the tools' kinds are not in the log), says
-- so with ARGV[2] = '1', and a newest status `requires_action` is then passed over as an answered pause is.
-- KEYS[1] events (stream)
-- ARGV[1] most entries scanned (>= 1)
-- ARGV[2] '1': the newest status may be `requires_action` (a pause for sub-agents); '0': it must be `running`
-- Returns {cursor, run}: the id of the entry just before the message's first `running` status ('0-0' when it is
-- the oldest entry) and the id of the newest `running` status (the current run's start); {'0-0', ''} when no status
-- event is within the scan (the run's start was trimmed away: the caller, which knows the session runs, replays what
-- the log keeps); or false when the newest status is not `running` (nor an allowed `requires_action`).
local max = tonumber(ARGV[1])
local agents_pause = ARGV[2] == '1'
local last = '+'
local seen = 0
local run, start = nil, nil
-- What the scan looks for next, going back: 'running' (a run's start), or 'pause' (the status before that start).
local want = 'running'
local function status_of(d)
  local ok, data = pcall(cjson.decode, d or 'null')
  if not ok or type(data) ~= 'table' then return nil end
  return data['status']
end
local function result()
  if not run then return { '0-0', '' } end
  local before = redis.call('XREVRANGE', KEYS[1], '(' .. start, '-', 'COUNT', 1)[1]
  return { before and before[1] or '0-0', run }
end
while seen < max do
  local rows = redis.call('XREVRANGE', KEYS[1], last, '-', 'COUNT', math.min(64, max - seen))
  if #rows == 0 then return result() end
  for _, row in ipairs(rows) do
    seen = seen + 1
    local fields = row[2]
    local t, d = nil, nil
    for i = 1, #fields, 2 do
      if fields[i] == 't' then t = fields[i + 1] elseif fields[i] == 'd' then d = fields[i + 1] end
    end
    if t == 'session.status' then
      local s = status_of(d)
      if not run then
        if s == 'running' then
          run, start, want = row[1], row[1], 'pause'
        elseif s == 'requires_action' and agents_pause then
          -- The pause for sub-agents (a status again each time one of them answers): the run's start is the
          -- `running` before it.
        else
          return false
        end
      elseif s == 'running' then
        start, want = row[1], 'pause'
      elseif s == 'requires_action' and want == 'pause' then
        want = 'running'
      elseif s ~= 'requires_action' then
        return result()
      end
    end
  end
  last = '(' .. rows[#rows][1]
end
return result()
