-- due-read: a page of the endpoints due by now of Redis's clock (includes/now.lua), with their scores (for
-- due-set-1.lua's guard), and that now. Due scores are now of this node (due-now-1.lua) or the next due time a claim
-- or a settle answered (its endpoint's node).
-- KEYS[1] due set (zset webhook -> ms)
-- ARGV[1] offset  ARGV[2] most endpoints
-- Returns {now, webhook id, score, ...}.
--- @include "../../store/lua/includes/now"
local now = now_ms()
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', tonumber(ARGV[1]),
  tonumber(ARGV[2]))
table.insert(out, 1, now)
return out
