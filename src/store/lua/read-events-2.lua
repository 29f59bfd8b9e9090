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
--         the budget, so Redis and the reader never hold more than the budget plus one event for a page.
-- Returns {oldest id or false, newest id or false, `ev_cut` or false (none recorded), entry, entry, ...},
-- each entry as XRANGE gives it: {id, {field, value, ...}}.
local oldest = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
local out = { oldest and oldest[1] or false, newest and newest[1] or false, redis.call('HGET', KEYS[2], 'ev_cut') }
if ARGV[1] == '' or not newest then return out end
local max = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local start = ARGV[1]
local n, bytes = 0, 0
-- Entries are read a few at a time, as many as the budget left would hold at the largest size seen so far (at
-- least one, at most 64), so a log of large events is not copied wholesale into the script's memory.
local chunk, largest = 4, 0
while n < max do
  local rows = redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', math.min(chunk, max - n))
  for _, row in ipairs(rows) do
    local size = 0
    local fields = row[2]
    for i = 2, #fields, 2 do size = size + #fields[i] end
    if n > 0 and bytes + size > budget then return out end
    out[#out + 1] = row
    n = n + 1
    bytes = bytes + size
    if size > largest then largest = size end
    if n >= max or bytes >= budget then return out end
  end
  if #rows < chunk then return out end
  start = '(' .. rows[#rows][1]
  chunk = math.max(1, math.min(64, math.floor((budget - bytes) / largest) + 1))
end
return out
