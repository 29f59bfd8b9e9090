-- memory-remove: deletes a memory file, or a directory (every file under `path/`) of a tenant.
-- KEYS[1] files (hash path → content), KEYS[2] bytes (string: UTF-8 bytes of all files)
-- ARGV[1] path ('' is the root: every file), ARGV[2] '1': the file only, never a directory
-- Returns the number of files deleted. Cost: O(files of the tenant) for a directory (bounded by MEMORY_MAX_FILES).
local path = ARGV[1]
local freed, count = 0, 0
local current = path ~= '' and redis.call('HGET', KEYS[1], path)
if current then
  redis.call('HDEL', KEYS[1], path)
  freed, count = #current, 1
elseif ARGV[2] ~= '1' then
  local prefix = path == '' and '' or path .. '/'
  for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
    if string.sub(k, 1, #prefix) == prefix then
      freed, count = freed + redis.call('HSTRLEN', KEYS[1], k), count + 1
      redis.call('HDEL', KEYS[1], k)
    end
  end
end
if count > 0 then redis.call('DECRBY', KEYS[2], freed) end
return count
