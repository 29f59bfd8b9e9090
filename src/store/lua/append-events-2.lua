-- append-events: the live stream events of a turn, appended to the session's log, and their notice.
-- KEYS[1] meta (hash: the log's byte count `ev_bytes`, the live news' mark `ev_mark`)  KEYS[2] events (stream)
-- ARGV[1] pub/sub channel  ARGV[2] most entries kept  ARGV[3] `at` (ms)  ARGV[4] notice size limit (bytes)
-- ARGV[5] most bytes kept (includes/event-log.lua)  ARGV[6] mark token ('': none; includes/event-mark.lua)
-- ARGV[7] the mark's number of the first event  ARGV[8..] type, data, type, data, ...
-- Returns the id of the last event written (false when none was: all had landed already, or the mark's run no longer
-- holds the session). The log of a deleted session (no meta) is written, unmarked, but not counted: it expires with
-- its `session.deleted` event.
--- @include "includes/notice"
--- @include "includes/event-log"
--- @include "includes/event-mark"
local first, n = tonumber(ARGV[7]), (#ARGV - 7) / 2
local skip = mark_skip(KEYS[1], ARGV[6], first)
if not skip then return false end
-- (A marked write goes on only on a live session: mark_skip looked.)
local live = ARGV[6] ~= '' or redis.call('EXISTS', KEYS[1]) == 1
notice_before(KEYS[2], KEYS[1])
local max = tonumber(ARGV[4])
for i = 8 + 2 * skip, #ARGV, 2 do
  local id = log_xadd(KEYS[2], ARGV[i], ARGV[i + 1], nil, ARGV[3])
  notice_add(max, id, ARGV[i], ARGV[3], '0', ARGV[i + 1])
end
if live then
  -- (A batch that had landed whole leaves the mark where it is: a later batch may have moved it on.)
  if skip < n then mark_set(KEYS[1], ARGV[6], first + n - 1) end
  log_trim(KEYS[2], KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[5]))
end
notice_publish(ARGV[1])
return notice_last
