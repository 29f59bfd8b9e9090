-- segment-if-fits: one of a session's kept segments, sent only if it fits in what a chat page (src/chat/record.ts)
-- may still read: for a segment whose byte length the meta hash does not hold (`seg_bytes`: kept before this
-- version wrote it, or pushed by an older version's compaction), weighed here when the page is about to read it, so
-- a segment too large is copied into the script and measured, never sent. One segment per call: a page copies at
-- most one segment it does not read (the one that ends its read).
-- KEYS[1] compacted (list: the kept segments, oldest first)
-- ARGV[1] the segment's index  ARGV[2] most bytes it may have to be sent
-- Returns the segment when it has at most ARGV[2] bytes, else its byte length (an integer); nil past the list's end.
local s = redis.call('LINDEX', KEYS[1], tonumber(ARGV[1]))
if not s then return false end
if #s > tonumber(ARGV[2]) then return #s end
return s
