-- append-events: the live stream events of a turn, appended to the session's log, and their notice.
-- KEYS[1] events (stream)
-- ARGV[1] pub/sub channel  ARGV[2] MAXLEN (approximate trim)  ARGV[3] `at` (ms)  ARGV[4] notice size limit (bytes)
-- ARGV[5..] type, data, type, data, ...
-- Returns the id of the last event written.
--- @include "includes/notice"
notice_before(KEYS[1])
local max = tonumber(ARGV[4])
for i = 5, #ARGV, 2 do
  local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 't', ARGV[i], 'd', ARGV[i + 1], 'at', ARGV[3])
  notice_add(max, id, ARGV[i], ARGV[3], '0', ARGV[i + 1])
end
notice_publish(ARGV[1])
return notice_last
