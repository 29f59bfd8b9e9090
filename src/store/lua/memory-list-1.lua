-- memory-list: the paths of a tenant's memory files with their sizes, for a directory listing.
-- KEYS[1] files (hash path → content)
-- ARGV[1] prefix ('' for all, else `dir/`)
-- Returns a flat array path, bytes, path, bytes, … (unsorted). Cost: O(files of the tenant), bounded by MEMORY_MAX_FILES.
local prefix = ARGV[1]
local out = {}
for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(k, 1, #prefix) == prefix then
    out[#out + 1] = k
    out[#out + 1] = redis.call('HSTRLEN', KEYS[1], k)
  end
end
return out
