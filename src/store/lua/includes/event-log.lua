-- event-log: appends to a session's event log (stream), bounded in entries and in bytes.
-- An entry's size is counted as #type + #data + 32 (the data dominates; 32 stands for the field names, id, revision
-- and time). The log's total is kept in the meta hash field `ev_bytes`, so a write knows it without reading the log.
-- Use: log_xadd(...) for each event, then log_trim(...) once at the end of the script.
-- Trimming drops the oldest entries, exactly (XTRIM MINID), until the log holds at most `maxlen` entries and
-- `maxbytes` bytes, but never its newest entry. A reader whose cursor is older than the oldest entry kept learns
-- that its cursor expired (410 `cursor_expired`): the meta hash field `ev_cut` holds `<newest id trimmed> <oldest id
-- kept>` as of the last trim, so a cursor at or after the first lost nothing, even when its own event was trimmed.
-- Readers trust it only while the log's oldest id is still the second: a trim that did not record itself (a replica
-- of an older release) or a log made again leaves it stale, and readers then compare with the oldest id kept (as
-- for a log never trimmed, or trimmed before the field existed). The byte counter is only as
-- exact as the writes that kept it: entries written before it existed (or by hand) are not in it, so it is clamped
-- at 0 and never trims the newest entry.
-- The meta hash field `ev_last` holds the id of the newest entry written (recorded by log_trim), so a reader learns
-- the log's newest id without reading that entry (every entry a script reads is copied whole into its Lua: up to
-- ~1 MB). Readers check it (read-events-2.lua): a writer that did not record it (a replica of an older release, a
-- write to a log whose meta hash is gone) leaves it behind the log's newest.
local log_added = 0
-- The id of the last entry log_xadd wrote since the last log_trim (false: none).
local log_last = false
local function log_entry_size(t, d) return #t + #d + 32 end
-- XADD of one entry (fields t, d, r when `rev` is given, at); returns its id.
local function log_xadd(key, t, d, rev, at)
  log_added = log_added + log_entry_size(t, d)
  if rev then
    log_last = redis.call('XADD', key, '*', 't', t, 'd', d, 'r', rev, 'at', at)
  else
    log_last = redis.call('XADD', key, '*', 't', t, 'd', d, 'at', at)
  end
  return log_last
end
local function log_row_size(fields)
  local t, d = '', ''
  for i = 1, #fields, 2 do
    if fields[i] == 't' then t = fields[i + 1] elseif fields[i] == 'd' then d = fields[i + 1] end
  end
  return log_entry_size(t, d)
end
local function log_trim(key, meta, maxlen, maxbytes)
  local total = tonumber(redis.call('HINCRBY', meta, 'ev_bytes', log_added))
  log_added = 0
  if log_last then redis.call('HSET', meta, 'ev_last', log_last) end
  log_last = false
  local len = redis.call('XLEN', key)
  local over_n = len - maxlen
  local over_b = total - maxbytes
  if over_n <= 0 and over_b <= 0 then return end
  local n, b, keep, cut, start = 0, 0, false, false, '-'
  -- Entries are copied whole into the script, so the oldest are read only as many at a time as the trim still
  -- needs, counted at the mean size of the log (the counter's) for the first read, then at that of the entries
  -- dropped so far, plus the one kept (its id is recorded): a log of large events reads about what it drops, a
  -- flush of small ones on a full log one batch. At most 32 at a time, and at most twice as many as the read before.
  local mean = math.max(1, total / math.max(1, len))
  local batch = 32
  while not keep do
    local by_bytes = over_b > b and math.ceil((over_b - b) / mean) or 0
    batch = math.max(1, math.min(batch, math.max(over_n - n, by_bytes) + 1))
    local rows = redis.call('XRANGE', key, start, '+', 'COUNT', batch)
    if #rows == 0 then break end
    for _, row in ipairs(rows) do
      if (n >= over_n and b >= over_b) or n >= len - 1 then keep = row[1]; break end
      n = n + 1
      b = b + log_row_size(row[2])
      cut = row[1]
    end
    start = '(' .. rows[#rows][1]
    if n > 0 then mean = math.max(1, b / n) end
    batch = math.min(32, 2 * batch)
  end
  if keep and n > 0 then
    redis.call('XTRIM', key, 'MINID', keep)
    redis.call('HSET', meta, 'ev_cut', cut .. ' ' .. keep)
    if b > total then b = total end
    redis.call('HINCRBY', meta, 'ev_bytes', -b)
  end
end
