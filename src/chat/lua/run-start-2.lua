-- run-start: where the assistant message of a session's current run begins in its event log, for a chat stream
-- resumed from its start (GET /v1/chat/:id/stream). The message is what GET /v1/chat/:id/messages shows as the
-- history's last assistant message (src/chat/history.ts toUIMessages): everything after the newest user turn the
-- history shows as a user message (`asks` below), whatever runs made it: runs that paused for the client
-- (`requires_action`, then `running` again once it answered), and runs that failed or stopped and were taken up
-- again without a new question (POST …/resume, …/retry, …/continue). So the scan goes back from the newest entry to the newest `message.appended` of such a user
-- turn (a follow-up that joined a step's tool results included: it starts a message of its own), or the newest
-- `messages.replaced` (a history rewritten: what came before is not in it as logged). The newest `session.status`
-- must say `running`, else no run is active. A `POST …/retry` (its `turn.dropped` with reason `retry`) dropped steps
-- of the runs before it: the replay then starts at the run the retry started (the `running` after it), as the log
-- does not say which of the earlier steps the history still holds; the history does, and the caller shows its
-- messages before that run (their count is returned) ahead of the replay.
-- A run that waits only for its sub-agents is still active (the service answers them and the run goes on): the caller,
-- which can tell such a pause from the session's state (this script cannot: the tools' kinds are not in the log), says
-- so with ARGV[2] = '1', and a newest status `requires_action` is then passed over as an answered pause is.
-- KEYS[1] events (stream)  KEYS[2] msgs (list: the live history)
-- ARGV[1] most entries scanned (>= 1)
-- ARGV[2] '1': the newest status may be `requires_action` (a pause for sub-agents); '0': it must be `running`
-- ARGV[3] most bytes scanned (the sum of the entries' field values; absent: no bound but ARGV[1]). Entries are
--         copied whole into the script: a log of large events stalls Redis for every tenant as long as they take to
--         copy (and decode). Past it the scan ends as at its bound in entries.
-- Returns {cursor, run, whole, kept}: the id of the entry the replay begins after ('0-0': the log's oldest entry),
-- the id of the newest `running` status (the current run's start; '' when the scan did not reach it), whole '1' when
-- the replay begins at a turn's start ('0': where the log or the scan starts, maybe inside a turn), and, when the
-- replay begins at a retry's run, the number of live history messages before that run ('' otherwise); or false
-- when the newest status is not `running` (nor an allowed `requires_action`).
local max = tonumber(ARGV[1])
local agents_pause = ARGV[2] == '1'
local budget = tonumber(ARGV[3]) or math.huge
local bytes = 0
local last = '+'
local seen = 0
local run, begins = nil, nil
-- The oldest `running` read so far; whether a retry's `turn.dropped` was read.
local since = nil
local rewritten = false
-- The data of the oldest `turn.started` read so far, and of the oldest one after `since` (decoded only when kept).
local started, since_started = nil, nil
-- Whether a compaction was read (all read so far is newer than `since`).
local compacted = false
local oldest = nil
local function decoded(d)
  local ok, data = pcall(cjson.decode, d or 'null')
  if not ok or type(data) ~= 'table' then return nil end
  return data
end
-- A user turn the history shows as a user message: a block in what was added that src/chat/history.ts `userPart`
-- shows (src/chat/event-shapes.ts `isUserBlock`, the same test): text; an image with a `base64` or `url` source; a
-- document with a `base64`, `url` or `text` source. A document of source `content` or `file` (or an image of source
-- `file`), which POST /v1/sessions/:id/messages takes, shows nothing: the answer after it continues the message
-- before it, and so does the replay. The plain search first: only a user turn's data has the key at its top level
-- unescaped (text inside a string has it as `\"`).
local function shows(b)
  if type(b) ~= 'table' then return false end
  if b.type == 'text' then return type(b.text) == 'string' end
  if b.type ~= 'image' and b.type ~= 'document' then return false end
  local src = b.source
  if type(src) ~= 'table' then return false end
  if src.type == 'base64' then return type(src.media_type) == 'string' and type(src.data) == 'string' end
  if src.type == 'url' then return type(src.url) == 'string' end
  if src.type == 'text' then return b.type == 'document' and type(src.data) == 'string' end
  return false
end
local function asks(d)
  if not d or not string.find(d, '"role":"user"', 1, true) then return false end
  -- No block that could show (tool results whose content is a string: the common large user turn): no decoding.
  if not (string.find(d, '"type":"text"', 1, true) or string.find(d, '"type":"image"', 1, true)
      or string.find(d, '"type":"document"', 1, true)) then
    return false
  end
  local data = decoded(d)
  if not data or type(data.content) ~= 'table' then return false end
  for _, b in ipairs(data.content) do
    if shows(b) then return true end
  end
  return false
end
-- A status event's status: from the data's first bytes as the service writes it (src/engine/status.ts
-- `statusEvent`: `status` first; its `required_action` may be large), else decoded.
local function status_of(d)
  local s = d and string.match(d, '^{"status":"([%w_]+)"')
  if s then return s end
  return (decoded(d) or {})['status']
end
-- The id of the entry just before `id` ('0-0' when none).
local function before(id)
  local row = redis.call('XREVRANGE', KEYS[1], '(' .. id, '-', 'COUNT', 1)[1]
  return row and row[1] or '0-0'
end
-- The live history's length when the run that `since` starts began: what its first turn was sent with (the retry's
-- trim and its `running` are one change; a turn's `turn.started` is logged before its reply's commit, or with it),
-- else, no turn of it having started, the history now (read in this script: no reply of the run is in it yet).
local function kept()
  -- A compaction since then rewrote the live history (its positions moved): no count to trust, no steps seeded.
  if compacted then return '' end
  local count = since_started and (decoded(since_started) or {})['message_count']
  if type(count) == 'number' then return tostring(count) end
  return tostring(redis.call('LLEN', KEYS[2]))
end
-- Entries are read a few at a time: one at first, then at most twice as many as the read before, and no more than
-- the budget left would hold at the largest size seen so far (one at a time once an entry took that much), at most 64.
local chunk, largest = 1, 0
while seen < max and bytes < budget do
  local rows = redis.call('XREVRANGE', KEYS[1], last, '-', 'COUNT', math.min(chunk, max - seen))
  if #rows == 0 then return { begins or '0-0', run or '', begins and '1' or '0', '' } end
  for _, row in ipairs(rows) do
    seen = seen + 1
    oldest = row[1]
    local fields = row[2]
    local t, d = nil, nil
    local size = 0
    for i = 1, #fields, 2 do
      if fields[i] == 't' then t = fields[i + 1] elseif fields[i] == 'd' then d = fields[i + 1] end
      size = size + #fields[i + 1]
    end
    bytes = bytes + size
    if size > largest then largest = size end
    if t == 'session.status' then
      local s = status_of(d)
      if not run then
        if s == 'running' then
          run, since, since_started = row[1], row[1], started
        elseif not (s == 'requires_action' and agents_pause) then
          -- The newest status says the session runs nothing (a pause for sub-agents: a status again each time one of
          -- them answers, the run's start is the `running` before it).
          return false
        end
      elseif s == 'running' then
        since, since_started = row[1], started
      elseif rewritten and not begins then
        -- An earlier run's end (`idle`, `failed`) or pause (`requires_action`: a retry may start from one) before a
        -- retry: what it logged may be gone from the history.
        return { before(since), run, '1', kept() }
      end
    elseif t == 'turn.started' then
      started = d
    elseif t == 'compaction.completed' then
      compacted = true
    elseif t == 'turn.dropped' then
      if string.find(d or '', '"reason":"retry"', 1, true) then rewritten = true end
    elseif not begins and (t == 'messages.replaced' or (t == 'message.appended' and asks(d))) then
      begins = row[1]
    end
    -- The question is merged by the run it starts, after its `running`: both are needed.
    if run and begins then return { begins, run, '1', '' } end
  end
  last = '(' .. rows[#rows][1]
  chunk = math.max(1, math.min(64, 2 * #rows, math.floor((budget - bytes) / largest)))
end
-- The scan's bound reached first: the replay starts at the oldest entry it read, maybe inside a turn.
return { oldest and before(oldest) or '0-0', run or '', '0', '' }
