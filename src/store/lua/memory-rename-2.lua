-- memory-rename: moves a memory file, or a directory (every file under `from/`), of a tenant.
-- KEYS[1] files (hash path → content), KEYS[2] bytes (unused: sizes do not change; declared for the slot)
-- ARGV[1] from, ARGV[2] to
-- Returns 'ok', 'not_found' (nothing at `from`), 'exists' (a file at `to` or under `to/`), 'into_itself'.
local from, to = ARGV[1], ARGV[2]
local function taken(p)
  if redis.call('HEXISTS', KEYS[1], p) == 1 then return true end
  local all = redis.call('HKEYS', KEYS[1])
  for _, k in ipairs(all) do
    if string.sub(k, 1, #p + 1) == p .. '/' then return true end
  end
  return false
end
if string.sub(to, 1, #from + 1) == from .. '/' then return 'into_itself' end
local current = redis.call('HGET', KEYS[1], from)
if current then
  if taken(to) then return 'exists' end
  redis.call('HSET', KEYS[1], to, current)
  redis.call('HDEL', KEYS[1], from)
  return 'ok'
end
local prefix = from .. '/'
local moves = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if string.sub(all[i], 1, #prefix) == prefix then moves[#moves + 1] = { all[i], all[i + 1] } end
end
if #moves == 0 then return 'not_found' end
if taken(to) then return 'exists' end
for _, m in ipairs(moves) do
  redis.call('HDEL', KEYS[1], m[1])
  redis.call('HSET', KEYS[1], to .. '/' .. string.sub(m[1], #prefix + 1), m[2])
end
return 'ok'
