-- due-read: a page of the endpoints due by now of Redis's clock (TIME, as includes/now.lua reads it), with their
-- scores (for due-set-1.lua's guard), and that now. Due scores are now of this node (due-now-1.lua) or the next due
-- time a claim or a settle answered (its endpoint's node). A `fresh` score carries the microseconds of its TIME, so
-- it is compared with now to the microsecond: an endpoint made due in this same millisecond is due.
-- KEYS[1] due set (zset webhook -> ms)
-- ARGV[1] offset  ARGV[2] most endpoints
-- Returns {now (ms, whole), webhook id, score, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', tonumber(ARGV[1]),
  tonumber(ARGV[2]))
table.insert(out, 1, math.floor(now))
return out
