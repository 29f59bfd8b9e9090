-- read-events: one page of a session's event log after a cursor, bounded in events and in bytes, with the ids of
-- the oldest and newest events the log holds and of the newest event ever trimmed from it, all read at one instant
-- (a trim or an append between them cannot show a gap that is not there, or hide one that is).
-- KEYS[1] events (stream)
-- KEYS[2] the session's meta hash (its `ev_cut`, `<newest id trimmed> <oldest id kept then>`: includes/event-log.lua)
-- ARGV[1] the first id the page may hold (inclusive: the cursor plus one; `-` for the start of the log; empty:
--         no id can follow the cursor, only the bounds are read)
-- ARGV[2] most events in the page (>= 1)
-- ARGV[3] byte budget of the page: the sum of the entries' field values (type, data, revision, time). The page
--         holds the first event after the cursor whatever its size, then the next ones while the sum stays within
--         the budget, so the reader never holds more than the budget plus one event for a page. Redis copies each
--         entry it reads whole into the script (a log of large events stalls it for every tenant as long as that
--         takes): it reads the page, then what the budget left could hold at the sizes seen so far (see below), and
--         the oldest and newest entries only where the page's reads did not show them.
-- Returns {oldest id or false, newest id or false, `ev_cut` or false (none recorded), entry, entry, ...},
-- each entry as XRANGE gives it: {id, {field, value, ...}}.
local max = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local cut = redis.call('HGET', KEYS[2], 'ev_cut')
-- The bounds are learnt from the page's own reads where they show them (an XRANGE that returned fewer entries than
-- asked for ended at the newest; a page from `-` starts at the oldest), else with a read of one entry: entries are
-- copied whole into the script, so each one read costs its size.
local oldest, newest = nil, nil
local page = {}
if ARGV[1] ~= '' then
  local start = ARGV[1]
  local n, bytes = 0, 0
  -- Entries are read a few at a time, so that a page of large events copies little more than the budget: one at
  -- first (the page holds it whatever its size), then at most twice as many as the read before, and no more than
  -- the budget left would hold at the largest size seen so far (one at a time once an entry took that much).
  local chunk, largest = 1, 0
  -- The id of the last entry read (nil: none yet).
  local read = nil
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
if not newest then
  local row = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
  newest = row and row[1]
end
local out = { oldest or false, newest or false, cut }
for _, row in ipairs(page) do out[#out + 1] = row end
return out
