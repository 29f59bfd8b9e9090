-- due-read: the entries of a due set (actions:due, sessions:expiry) due by now of Redis's clock (includes/now.lua),
-- oldest first, with their scores (for due-settle-1.lua's guard), and that now: the sweeper compares the session's
-- deadline (or expiry) with it, so a replica whose clock runs ahead does not time out actions (nor delete sessions)
-- early for every session.
-- KEYS[1] the due set (zset)
-- ARGV[1] most entries
-- Returns {now, member, score, ...}.
--- @include "includes/now"
local now = now_ms()
local out = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
table.insert(out, 1, now)
return out
