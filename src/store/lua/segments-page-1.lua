-- segments-page: a page of a session's kept segments, bounded in bytes, so that no reply carries more than ARGV[2]
-- bytes of them however many or large they are (Store `segmentTexts`: `?include=compacted`, a reply read back from
-- its segment, a fork's history). Each segment is weighed here (copied into the script: a memory copy, no parse),
-- and one too large for the page is not sent: only its length, for the reader to read it in parts
-- (segment-part-1.lua). A stub (a segment kept in a key of its own, apply-8.lua `compact`) is sent as it is: the
-- reader reads the key it names in pieces. At most 256 segments a page, so the script's time is bounded too.
-- KEYS[1] compacted (list: the kept segments, oldest first; only ever appended to, or deleted with the session)
-- ARGV[1] the index of the page's first segment  ARGV[2] most bytes of the segments sent
-- ARGV[3] most segments sent (1–256; absent: 256): a reader that knows which segment it wants (meta `seg_counts`)
--         takes one a page, not the ones after it that the bytes would let in
-- Returns {length, …}: the list's length, then the segments from ARGV[1] on, as they are, while together they have at
-- most ARGV[2] bytes; when the first of them has more, its byte length (an integer) alone in its place. Only the
-- length past the list's end.
local first = tonumber(ARGV[1])
local most = tonumber(ARGV[2])
local count = math.max(1, math.min(256, tonumber(ARGV[3] or '256') or 256))
local out = {redis.call('LLEN', KEYS[1])}
local used = 0
for i = first, first + count - 1 do
  local s = redis.call('LINDEX', KEYS[1], i)
  if not s then break end
  if used + #s > most then
    if i == first then out[2] = #s end
    break
  end
  out[#out + 1] = s
  used = used + #s
end
return out
