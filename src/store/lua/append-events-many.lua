-- append-events-many: append-events for several sessions in one call: the stream relays' batches of one flush
-- (src/engine/stream-relay.ts), on a standalone Redis only (the keys of different sessions are in different slots of
-- a cluster). Each session's log, trim, mark and notice are exactly those append-events writes for it, in KEYS order.
-- KEYS[1] meta, KEYS[2] events (stream) of the first session; KEYS[2i-1], KEYS[2i] those of the i-th (a variadic
-- key list: 2 per session)
-- ARGV[1] most entries kept  ARGV[2] `at` (ms)  ARGV[3] notice size limit (bytes)  ARGV[4] most bytes kept
-- ARGV[5..] per session, in KEYS order: its pub/sub channel, its event count n, its mark token ('': none) and the
-- mark's number of its first event (includes/event-mark.lua), then n type, data pairs.
-- Returns the number of sessions in the call (a session whose mark's run no longer holds it is not written).
--- @include "includes/notice"
--- @include "includes/event-log"
--- @include "includes/event-mark"
local max = tonumber(ARGV[3])
local a = 5
for s = 1, #KEYS / 2 do
  local meta, events = KEYS[2 * s - 1], KEYS[2 * s]
  local channel, n, token, first = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2], tonumber(ARGV[a + 3])
  a = a + 4
  -- The fragments' state is per session: a fresh notice, no bytes counted yet.
  notice_parts, notice_size, notice_prev, notice_last = {}, 0, false, false
  log_added, log_last = 0, false
  local skip = mark_skip(meta, token, first)
  if skip then
    -- (A marked write goes on only on a live session: mark_skip looked.)
    local live = token ~= '' or redis.call('EXISTS', meta) == 1
    notice_before(events, meta)
    for i = a + 2 * skip, a + 2 * n - 1, 2 do
      local id = log_xadd(events, ARGV[i], ARGV[i + 1], nil, ARGV[2])
      notice_add(max, id, ARGV[i], ARGV[2], '0', ARGV[i + 1])
    end
    if live then
      if skip < n then mark_set(meta, token, first + n - 1) end
      log_trim(events, meta, tonumber(ARGV[1]), tonumber(ARGV[4]))
    end
    notice_publish(channel)
  end
  a = a + 2 * n
end
return #KEYS / 2
