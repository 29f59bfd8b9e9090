-- due-add: register a member of a due set (actions:due, sessions:expiry) as due at a time, keeping an earlier entry
-- (the sweeper moves an early one on), and always changing its score: a sweeper that read the old score and is
-- about to drop or move it (due-settle-1.lua, guarded by that score) then finds it changed and leaves it, so a
-- deadline registered while a sweep is under way is never lost.
-- KEYS[1] the due set (zset)
-- ARGV[1] member  ARGV[2] when it is due (ms), or with ARGV[3] 'in': in how many ms from now of Redis's clock
-- (includes/now.lua; sessions:expiry, which the retention sweep reads by that clock with due-read-1.lua)
-- ARGV[3] '' or absent (ARGV[2] is a time), 'in' (ARGV[2] is a duration)
-- Returns the member's score now.
--- @include "includes/now"
local at = tonumber(ARGV[2])
if ARGV[3] == 'in' then at = now_ms() + at end
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
-- An entry already due at or before `at` stays first in line, 1 ms earlier.
if cur and tonumber(cur) <= at then at = tonumber(cur) - 1 end
redis.call('ZADD', KEYS[1], at, ARGV[1])
return at
