-- children-mark: marks a child created in its parent's children set (src/agents/sweep.ts `childrenKey`), once. The
-- mark is Redis's now in ms, raised above the set's highest score when that is not below it (a mark in the same
-- millisecond, or one left by an earlier version's replica clock): marks only grow, so a child marked after a page's
-- cursor was handed out always sorts after that cursor (children-page-1.lua), never behind it, skipped.
-- A member already marked (above 0) keeps its mark: its place in the order does not move.
-- KEYS[1] the children set (sorted set: child id → its mark in ms, 0 while its create is under way)
-- ARGV[1] the child's id
-- Returns the child's mark (ms, as a string).
local cur = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if cur > 0 then return tostring(cur) end
local t = redis.call('TIME')
local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) >= at then at = tonumber(top[2]) + 1 end
redis.call('ZADD', KEYS[1], at, ARGV[1])
return tostring(at)
