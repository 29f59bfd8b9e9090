-- event-mark: live events written at least once and never twice. A run's live news (src/engine/live-news.ts) numbers
-- its events; a batch whose write failed without an answer (a timeout, a dropped connection: it may have run) is sent
-- again under the same numbers, and what landed already is skipped. The meta hash field `ev_mark` holds the run's
-- mark token and the number of the last event written under it: `<token> <seq>`. Only one writer per session writes
-- under a mark at a time (the run holding the lease); a write under another token starts the count afresh.
-- Use: mark_skip(...) before the first XADD (how many of the batch's events landed already), mark_set(...) after.
-- Only on a live session (meta exists): a deleted session's log is never marked.
local function mark_skip(meta, token, first)
  if token == '' then return 0 end
  local m = redis.call('HGET', meta, 'ev_mark')
  if not m then return 0 end
  local sp = string.find(m, ' ', 1, true)
  if not sp or string.sub(m, 1, sp - 1) ~= token then return 0 end
  local last = tonumber(string.sub(m, sp + 1)) or 0
  if last < first then return 0 end
  return last - first + 1
end
local function mark_set(meta, token, last)
  if token ~= '' then redis.call('HSET', meta, 'ev_mark', token .. ' ' .. last) end
end
