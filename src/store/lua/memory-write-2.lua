-- memory-write: writes one memory file of a tenant, within the caps, optionally only if it is unchanged.
-- KEYS[1] files (hash path → content), KEYS[2] bytes (string: UTF-8 bytes of all files)
-- ARGV[1] path, ARGV[2] content, ARGV[3] expected: '' any (create or overwrite), '!' must not exist,
--   else the SHA-1 (hex) of the current content (a read-modify-write: str_replace, insert)
-- ARGV[4] max bytes of a file, ARGV[5] max bytes of all the tenant's files, ARGV[6] max files
-- Returns 'ok', or 'conflict' (changed since read, or gone), 'exists', 'file_too_big', 'tenant_full', 'too_many_files',
--   'not_a_directory' (a file is named by a directory of the path), 'is_directory' (files are under `path/`).
-- Invariant kept: no path is both a file and a directory. Cost of a new file: O(files of the tenant) (HKEYS, bounded
-- by MEMORY_MAX_FILES) plus one HEXISTS per level; an existing file's write: O(1).
local path, content, expected = ARGV[1], ARGV[2], ARGV[3]
local current = redis.call('HGET', KEYS[1], path)
if expected == '!' then
  if current then return 'exists' end
elseif expected ~= '' then
  if not current or redis.sha1hex(current) ~= expected then return 'conflict' end
end
if #content > tonumber(ARGV[4]) then return 'file_too_big' end
local old = current and #current or 0
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
if total - old + #content > tonumber(ARGV[5]) then return 'tenant_full' end
if not current then
  if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then return 'too_many_files' end
  local at = string.find(path, '/', 1, true)
  while at do
    if redis.call('HEXISTS', KEYS[1], string.sub(path, 1, at - 1)) == 1 then return 'not_a_directory' end
    at = string.find(path, '/', at + 1, true)
  end
  local prefix = path .. '/'
  for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(k, 1, #prefix) == prefix then return 'is_directory' end
  end
end
redis.call('HSET', KEYS[1], path, content)
redis.call('INCRBY', KEYS[2], #content - old)
return 'ok'
