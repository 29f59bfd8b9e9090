-- segment-sizes: the byte lengths of some of a session's kept segments, measured here so that nothing of them is
-- sent: the segments kept before apply-7.lua's `compact` wrote their lengths (meta `seg_bytes`), which a chat page
-- (src/chat/record.ts) needs before it reads one.
-- KEYS[1] compacted (list: the kept segments, oldest first)
-- ARGV[1] ARGV[2] … the indexes of the segments to measure
-- Returns the byte length of each segment named, in order (0 for an index past the list's end).
local out = {}
for i = 1, #ARGV do
  local s = redis.call('LINDEX', KEYS[1], tonumber(ARGV[i]))
  out[i] = s and #s or 0
end
return out
