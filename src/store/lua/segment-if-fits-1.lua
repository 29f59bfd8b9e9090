-- segment-if-fits: one of a session's kept segments, sent only if it fits in what a chat page (src/chat/record.ts)
-- may still read: for a segment whose byte length the meta hash does not hold (`seg_bytes`: kept before this
-- version wrote it, or pushed by an older version's compaction), weighed here when the page is about to read it, so
-- a segment too large is copied into the script and measured, never sent. One segment per call: a page copies at
-- most one segment it does not read (the one that ends its read). Nor is a segment sent that a `PUT …/messages`
-- replaced, when the page tells those by their record (ARGV[3]): its `at_iteration`, the segment's first field
-- (apply-8.lua `compact` writes `{"at_iteration":n,…`), is read here.
-- A stub (a segment kept in a key of its own, apply-8.lua `compact`: `{"at_iteration":n,"key":…,"bytes":b}`) is
-- weighed by the length it names, and sent as it is when that fits: the reader then reads the key it names.
-- KEYS[1] compacted (list: the kept segments, oldest first)
-- ARGV[1] the segment's index  ARGV[2] most bytes it may have to be sent
-- ARGV[3] a record number: a segment whose `at_iteration` is at most it is not sent (-1: none)
-- Returns the segment when it has at most ARGV[2] bytes and comes after ARGV[3]; else -1 when it does not come after
-- ARGV[3], or its byte length (an integer); nil past the list's end.
local s = redis.call('LINDEX', KEYS[1], tonumber(ARGV[1]))
if not s then return false end
local at = tonumber(string.match(string.sub(s, 1, 40), '^{"at_iteration":(%d+),'))
if at and at <= tonumber(ARGV[3]) then return -1 end
local stub = tonumber(string.match(s, '^{"at_iteration":%d+,"key":"[%w_-]+","bytes":(%d+)}$'))
if (stub or #s) > tonumber(ARGV[2]) then return stub or #s end
return s
