-- list-view: the fields of a session's meta hash that its view (src/sessions/view.ts) reads, for a list page
-- (session-index.ts), not the whole hash: the hash also holds the pending step's calls (their inputs, up to
-- BODY_LIMIT each once edited at approval), its results, the tools as last sent, … which a list item shows only in
-- `required_action`, and only while the session is `requires_action`. One script, so the status and the step read
-- are of one moment.
-- KEYS[1] the session's meta (hash)
-- ARGV[1], ARGV[2], … the fields the view reads by name (`status` among them)
-- Returns field, value, … : ARGV's fields the hash has, every `u_st_*` field (server tool counts, named by their
-- tool), and, when `status` is `requires_action`, `pending` and every `result:*` field (the step's results).
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
if not status then return out end
-- The names only (a few dozen, and one `result:` and `reported:` per pending call): no value is copied here.
local more = {}
for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(k, 1, 5) == 'u_st_' then
    more[#more + 1] = k
  elseif status == 'requires_action' and (k == 'pending' or string.sub(k, 1, 7) == 'result:') then
    more[#more + 1] = k
  end
end
if #more == 0 then return out end
vals = redis.call('HMGET', KEYS[1], unpack(more))
for i = 1, #more do
  if vals[i] then
    out[#out + 1] = more[i]
    out[#out + 1] = vals[i]
  end
end
return out
