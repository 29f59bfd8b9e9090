-- memory-write: writes one memory file of a tenant, within the caps, optionally only if it is unchanged.
-- KEYS[1] files (hash path → content), KEYS[2] bytes (string: UTF-8 bytes of all files)
-- ARGV[1] path, ARGV[2] content, ARGV[3] expected: '' any (create or overwrite), '!' must not exist,
--   else the SHA-1 (hex) of the current content (a read-modify-write: str_replace, insert)
-- ARGV[4] max bytes of a file, ARGV[5] max bytes of all the tenant's files, ARGV[6] max files
-- Returns 'ok', or 'conflict' (changed since read, or gone), 'exists', 'file_too_big', 'tenant_full', 'too_many_files'.
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
if not current and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then return 'too_many_files' end
redis.call('HSET', KEYS[1], path, content)
redis.call('INCRBY', KEYS[2], #content - old)
return 'ok'
