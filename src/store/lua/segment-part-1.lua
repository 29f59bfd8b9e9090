-- segment-part: bytes of one of a session's kept segments, from an offset: a segment too large for one reply (one an
-- older version kept in the list itself, of megabytes: segments-page-1.lua sends only its length) is read in parts
-- (Store `elementInParts`). The segment is copied into the script at each call (a memory copy), never sent whole.
-- KEYS[1] compacted (list: the kept segments, oldest first; only ever appended to, or deleted with the session)
-- ARGV[1] the segment's index  ARGV[2] the offset of the first byte (0: the segment's first)  ARGV[3] most bytes sent
-- Returns the segment's bytes from ARGV[2] on, at most ARGV[3] of them ('' past its end); nil past the list's end.
local s = redis.call('LINDEX', KEYS[1], tonumber(ARGV[1]))
if not s then return false end
local from = tonumber(ARGV[2])
return string.sub(s, from + 1, from + tonumber(ARGV[3]))
