-- list-view-fields: the fields of a session's meta hash that its view (src/sessions/view.ts) reads, for a list page
-- (session-index.ts), not the whole hash, and not the values of its pending step. The hash also holds the tools as
-- last sent, the chat and idempotency records, … which no view shows, and the step: its calls (their inputs, up to
-- BODY_LIMIT each once edited at approval) in `pending`, its results (up to MAX_TURN_BYTES together) in `result:*`.
-- A list item shows the step in `required_action`, only while the session is `requires_action`; then this script
-- names the step's fields and the list reads their values itself (a plain HMGET, with the revision that says they
-- are of the moment of this read): every value a script reads is copied into its Lua and out again, while Redis
-- serves no other tenant.
-- KEYS[1] the session's meta (hash)
-- ARGV[1], ARGV[2], … the fields the view reads by name (`status` among them)
-- Returns { fields, step }: `fields` is field, value, … of ARGV's fields the hash has and every `u_st_*` field
-- (server tool counts, named by their tool); `step` the names of the step's fields (`pending`, then every
-- `result:*`) when `status` is `requires_action` and `pending` holds a step, else empty.
local out = {}
local status = nil
local vals = redis.call('HMGET', KEYS[1], unpack(ARGV))
for i = 1, #ARGV do
  local v = vals[i]
  if v then
    out[#out + 1] = ARGV[i]
    out[#out + 1] = v
    if ARGV[i] == 'status' then status = v end
  end
end
if not status then return { out, {} } end
local shows = status == 'requires_action' and redis.call('HSTRLEN', KEYS[1], 'pending') > 0
-- The names only (a few dozen, and one `result:` and `reported:` per pending call): no value of the step is copied.
local more = {}
local step = shows and { 'pending' } or {}
for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(k, 1, 5) == 'u_st_' then
    more[#more + 1] = k
  elseif shows and string.sub(k, 1, 7) == 'result:' then
    step[#step + 1] = k
  end
end
if #more > 0 then
  vals = redis.call('HMGET', KEYS[1], unpack(more))
  for i = 1, #more do
    if vals[i] then
      out[#out + 1] = more[i]
      out[#out + 1] = vals[i]
    end
  end
end
return { out, step }
