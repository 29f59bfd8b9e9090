-- read-events: one page of a session's event log after a cursor, bounded in events and in bytes, with the ids of
-- the oldest and newest events the log holds and of the newest event ever trimmed from it, all read at one instant
-- (a trim or an append between them cannot show a gap that is not there, or hide one that is).
-- KEYS[1] events (stream)
-- KEYS[2] the session's meta hash (its `ev_cut`, `<newest id trimmed> <oldest id kept then>`, and `ev_last`, the
--         newest id written: includes/event-log.lua)
-- ARGV[1] the first id the page may hold (inclusive: the cursor plus one; `-` for the start of the log; empty:
--         no id can follow the cursor, only the bounds are read)
-- ARGV[2] most events in the page (>= 1)
-- ARGV[3] byte budget of the page: the sum of the entries' field values (type, data, revision, time). The page
--         holds the first event after the cursor whatever its size, then the next ones while the sum stays within
--         the budget, so the reader never holds more than the budget plus one event for a page. Redis copies each
--         entry it reads whole into the script (a log of large events stalls it for every tenant as long as that
--         takes): it reads the page, then what the budget left could hold at the sizes seen so far (see below), and
--         the oldest entry only where the page's reads did not show it. The newest entry is not read for its id:
--         `ev_last` names it, checked by a read of what follows it, which finds nothing unless a writer did not
--         record it (then the newest entry is read, as for a log that has no `ev_last`).
-- Returns {oldest id or false, newest id or false, `ev_cut` or false (none recorded), entry, entry, ...},
-- each entry as XRANGE gives it: {id, {field, value, ...}}.
local max = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local marks = redis.call('HMGET', KEYS[2], 'ev_cut', 'ev_last')
local cut = marks[1]
-- The bounds are learnt from the page's own reads where they show them (an XRANGE that returned fewer entries than
-- asked for ended at the newest; a page from `-` starts at the oldest), else the oldest with a read of one entry and
-- the newest from `ev_last`: entries are copied whole into the script, so each one read costs its size.
local oldest, newest = nil, nil
local page = {}
-- The id of the last entry the page's reads returned (nil: none).
local read = nil
if ARGV[1] ~= '' then
  local start = ARGV[1]
  local n, bytes = 0, 0
  -- Entries are read a few at a time, so that a page of large events copies little more than the budget: one at
  -- first (the page holds it whatever its size), then at most twice as many as the read before, and no more than
  -- the budget left would hold at the largest size seen so far (one at a time once an entry took that much).
  local chunk, largest = 1, 0
  while true do
    local ask = math.min(chunk, max - n)
    local rows = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', ask)
    if not read and start == '-' and rows[1] then oldest = rows[1][1] end
    if rows[1] then read = rows[#rows][1] end
    -- Fewer than asked for: the log ends there.
    if #rows < ask then newest = read end
    local full = false
    for _, row in ipairs(rows) do
      local size = 0
      local fields = row[2]
      for i = 2, #fields, 2 do size = size + #fields[i] end
      if n > 0 and bytes + size > budget then full = true; break end
      page[#page + 1] = row
      n = n + 1
      bytes = bytes + size
      if size > largest then largest = size end
      if n >= max or bytes >= budget then full = true; break end
    end
    if full or #rows < ask then break end
    start = '(' .. rows[#rows][1]
    chunk = math.max(1, math.min(64, 2 * ask, math.floor((budget - bytes) / largest)))
  end
  if not oldest and ARGV[1] ~= '-' then
    -- The oldest when it is before the cursor (one entry copied), else the page's first (none: an empty log).
    local row = redis.call('XRANGE', KEYS[1], '-', '(' .. ARGV[1], 'COUNT', 1)[1]
    oldest = row and row[1] or (page[1] and page[1][1])
  end
end
if not oldest then
  local row = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  oldest = row and row[1]
end
-- Whether stream id `a` is after `b`: canonical `<ms>-<seq>`, numbers of up to 20 digits (compared as text of equal
-- length, exactly; Lua's numbers are not, past 2^53).
local function later(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if am ~= bm then return #am > #bm or (#am == #bm and am > bm) end
  return #as > #bs or (#as == #bs and as > bs)
end
-- An empty log (no oldest) has no newest. Else, with a newest recorded (`ev_last`), the later of it and the last
-- entry the page read is the newest when no entry follows it, and that read copies nothing. One that does follow
-- (written by a writer that did not record `ev_last`: a replica of an older release) is copied, and the newest entry
-- read for its id, as it is for a log with none recorded (written before the record existed, or its meta hash gone).
if not newest and oldest and marks[2] then
  local known = marks[2]
  if read and later(read, known) then known = read end
  if not redis.call('XRANGE', KEYS[1], '(' .. known, '+', 'COUNT', 1)[1] then newest = known end
end
if not newest and oldest then
  local row = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
  newest = row and row[1]
end
local out = { oldest or false, newest or false, cut }
for _, row in ipairs(page) do out[#out + 1] = row end
return out
