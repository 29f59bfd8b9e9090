-- idem-release: an Idempotency-Key's `pending` record given up by the request that wrote it (its answer was a 5xx, or
-- its reservation's outcome is unknown), only if the record is still that request's own: never another request's
-- reservation nor a kept answer. Deletes it, or, with ARGV[2], hands it to a new request of the same key (the
-- replica that gave it up takes the retry at once, whatever Redis replayed meanwhile).
-- KEYS[1] the record (string)
-- ARGV[1] the owner of the pending record given up  ARGV[2] the new pending record (JSON) or ''  ARGV[3] its TTL (ms)
-- Returns 1 when the record was the owner's (deleted or replaced), else 0.
local cur = redis.call('GET', KEYS[1])
-- Written by src/store/idempotency.ts only, `state` first: a kept answer (maybe large) is not decoded.
if not cur or string.sub(cur, 1, 19) ~= '{"state":"pending",' then return 0 end
if cjson.decode(cur).owner ~= ARGV[1] then return 0 end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))
end
return 1
