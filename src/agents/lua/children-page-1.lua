-- children-page: a page of a parent's children set (src/agents/sweep.ts `childrenKey`: child id → the time its
-- create was marked, 0 while it is under way), in the set's order (score, then id byte by byte): the members after
-- the cursor's place. The place is where (score, id) sorts, not the cursor member's rank, so it holds when that
-- member has moved since (its mark raised from 0 to its time: children-mark-1.lua, the only move): the members after
-- the place are exactly those that sort after (score, id), each once, as they stand now.
-- KEYS[1] the children set (sorted set)
-- ARGV[1] the cursor's score ('' for the first page)  ARGV[2] the cursor's member  ARGV[3] most members returned
-- Returns a flat array member, score, member, score, … (at most ARGV[3] members). Cost: O(log n) commands, the
-- binary search over the members of the cursor's score included (ties of one millisecond, or the 0 marks).

-- a <= b as Redis orders members of one score (memcmp), not as Lua's `<=` does (strcoll: the server's locale).
local function le(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a <= #b
end

local key = KEYS[1]
local count = tonumber(ARGV[3])
local from = 0
if ARGV[1] ~= '' then
  local score = ARGV[1]
  -- The members of a lower score come first; among those of the cursor's score (in member order), those up to the
  -- cursor's member are skipped: the first rank whose member sorts after it, by a binary search over their ranks.
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. score)
  local hi = lo + redis.call('ZCOUNT', key, score, score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if le(redis.call('ZRANGE', key, mid, mid)[1], ARGV[2]) then lo = mid + 1 else hi = mid end
  end
  from = lo
end
return redis.call('ZRANGE', key, from, from + count - 1, 'WITHSCORES')
