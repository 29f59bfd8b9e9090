-- append-events: the live stream events of a turn, appended to the session's log, and their notice.
-- KEYS[1] meta (hash: the log's byte count `ev_bytes`)  KEYS[2] events (stream)
-- ARGV[1] pub/sub channel  ARGV[2] most entries kept  ARGV[3] `at` (ms)  ARGV[4] notice size limit (bytes)
-- ARGV[5] most bytes kept (includes/event-log.lua)  ARGV[6..] type, data, type, data, ...
-- Returns the id of the last event written. The log of a deleted session (no meta) is written but not counted:
-- it expires with its `session.deleted` event.
--- @include "includes/notice"
--- @include "includes/event-log"
notice_before(KEYS[2])
local max = tonumber(ARGV[4])
for i = 6, #ARGV, 2 do
  local id = log_xadd(KEYS[2], ARGV[i], ARGV[i + 1], nil, ARGV[3])
  notice_add(max, id, ARGV[i], ARGV[3], '0', ARGV[i + 1])
end
if redis.call('EXISTS', KEYS[1]) == 1 then log_trim(KEYS[2], KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[5])) end
notice_publish(ARGV[1])
return notice_last
