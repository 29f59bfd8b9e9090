-- event-mark: live events written at least once and never twice. A run's live news (src/engine/live-news.ts) numbers
-- its events; a batch whose write failed without an answer (a timeout, a dropped connection: it may have run) is sent
-- again under the same numbers, and what landed already is skipped. The meta hash field `ev_mark` holds the run's
-- mark token and the number of the last event written under it: `<token> <seq>`. A token is `<fence>:<random>`: the
-- run's lease fence (acquire-run-4.lua) and its own. Only the run holding the lease writes under a mark: a marked write
-- from an older fence (an owner that lost its lease and kept retrying through an outage) or to a deleted session (no
-- meta) writes nothing, so it can neither land after the new owner's events nor make the mark another token's.
-- Use: mark_skip(...) before the first XADD (how many of the batch's events landed already; false: write none of
-- them), mark_set(...) after.
local function mark_skip(meta, token, first)
  if token == '' then return 0 end
  local f = redis.call('HMGET', meta, 'fence', 'ev_mark')
  local colon = string.find(token, ':', 1, true)
  if not f[1] or not colon or string.sub(token, 1, colon - 1) ~= f[1] then return false end
  local m = f[2]
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
