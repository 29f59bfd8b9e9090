-- memory-rename: moves a memory file, or a directory (every file under `from/`), of a tenant.
-- KEYS[1] files (hash path → content), KEYS[2] bytes (unused: sizes do not change; declared for the slot)
-- ARGV[1] from, ARGV[2] to (both canonical paths the caller checked), ARGV[3] max characters of a path (UTF-16 code
--   units, as src/memory/paths.ts counts them), ARGV[4] max levels of a path
-- Returns 'ok', 'not_found' (nothing at `from`), 'exists' (a file at `to` or under `to/`), 'into_itself',
--   'not_a_directory' (a file is named by a directory of `to`), 'too_long' (a moved file's new path would pass the
--   limits: `to` plus the longest suffix under `from/`, which the caller could not check).
-- Cost: O(files of the tenant) (HKEYS, bounded by MEMORY_MAX_FILES); contents are read only for the files moved.
local from, to = ARGV[1], ARGV[2]
local maxChars, maxDepth = tonumber(ARGV[3]), tonumber(ARGV[4])
local keys = redis.call('HKEYS', KEYS[1])
local function taken(p)
  if redis.call('HEXISTS', KEYS[1], p) == 1 then return true end
  local prefix = p .. '/'
  for _, k in ipairs(keys) do
    if string.sub(k, 1, #prefix) == prefix then return true end
  end
  return false
end
local function underFile(p)
  local at = string.find(p, '/', 1, true)
  while at do
    if redis.call('HEXISTS', KEYS[1], string.sub(p, 1, at - 1)) == 1 then return true end
    at = string.find(p, '/', at + 1, true)
  end
  return false
end
-- UTF-16 code units of UTF-8 text: one per character, two for a 4-byte one.
local function units(s)
  return select(2, string.gsub(s, '[^\128-\191]', '')) + select(2, string.gsub(s, '[\240-\247]', ''))
end
local function levels(s)
  return select(2, string.gsub(s, '/', '')) + 1
end
if string.sub(to, 1, #from + 1) == from .. '/' then return 'into_itself' end
local current = redis.call('HGET', KEYS[1], from)
if current then
  if taken(to) then return 'exists' end
  if underFile(to) then return 'not_a_directory' end
  redis.call('HSET', KEYS[1], to, current)
  redis.call('HDEL', KEYS[1], from)
  return 'ok'
end
local prefix = from .. '/'
local moves = {}
for _, k in ipairs(keys) do
  if string.sub(k, 1, #prefix) == prefix then
    local dest = to .. '/' .. string.sub(k, #prefix + 1)
    if units(dest) > maxChars or levels(dest) > maxDepth then return 'too_long' end
    moves[#moves + 1] = { k, dest }
  end
end
if #moves == 0 then return 'not_found' end
if taken(to) then return 'exists' end
if underFile(to) then return 'not_a_directory' end
for _, m in ipairs(moves) do
  redis.call('HSET', KEYS[1], m[2], redis.call('HGET', KEYS[1], m[1]))
  redis.call('HDEL', KEYS[1], m[1])
end
return 'ok'
