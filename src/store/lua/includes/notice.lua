-- notice: the pub/sub notice of the events a script wrote, included by the scripts that write events.
-- When the events are small enough and contain no raw line break (JSON text never does), the notice carries them,
-- with the id of the entry before the first one (`prev`), so a relay whose cursor is `prev` fans them out without
-- reading the log; otherwise (or without a reader at `prev`) it carries only the newest id and relays read the log.
-- Format (lines): `E`, prev, newest, then per event: id, type, at (ms), revision (0: none), data. See
-- src/events/notice.ts.
-- Use: notice_before(events key, meta key) before the first XADD, notice_add(...) after each, notice_publish(channel)
-- last. `prev` is the log's newest id before the first XADD, learnt from the meta hash's record of it without copying
-- that entry (includes/log-newest.lua): every event-writing script runs this, every streamed delta's append among them.
--- @include "log-newest"
local notice_parts = {}
local notice_size = 0
local notice_prev = false
local notice_last = false
local function notice_before(key, meta)
  if notice_prev then return end
  notice_prev = log_newest(key, meta) or '0-0'
end
local function notice_add(max, id, t, at, rev, data)
  notice_last = id
  if not notice_parts then return end
  notice_size = notice_size + #data + #t + 64
  if notice_size > max or string.find(data, '\n', 1, true) then
    notice_parts = false
  else
    notice_parts[#notice_parts + 1] = id .. '\n' .. t .. '\n' .. at .. '\n' .. rev .. '\n' .. data
  end
end
local function notice_publish(channel)
  if not notice_last then return end
  if notice_parts then
    redis.call('PUBLISH', channel, 'E\n' .. notice_prev .. '\n' .. notice_last .. '\n' .. table.concat(notice_parts, '\n'))
  else
    redis.call('PUBLISH', channel, notice_last)
  end
end
