-- put: register or replace a tenant's MCP server, within the tenant's limit, bumping its revision (If-Match checked).
-- KEYS[1] tenant's MCP servers (hash name -> record JSON: url, headers (sealed), header_names, created_at,
--         updated_at, revision)
-- ARGV[1] name  ARGV[2] url  ARGV[3] headers, sealed  ARGV[4] header names (JSON array)  ARGV[5] now (ms)
-- ARGV[6] most servers per tenant  ARGV[7] the revision If-Match expects ('' for none)
-- Returns {1, revision} when created, {0, revision} when replaced, {-1, 0} when the tenant has its limit,
-- {-2, current revision} (0: none) when If-Match does not match.
local old = redis.call('HGET', KEYS[1], ARGV[1])
local created_at = tonumber(ARGV[5])
local revision = 1
local current = 0
if old then
  local rec = cjson.decode(old)
  created_at = rec.created_at
  current = rec.revision
  revision = rec.revision + 1
end
if ARGV[7] ~= '' and tonumber(ARGV[7]) ~= current then return {-2, current} end
if not old and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[6]) then
  return {-1, 0}
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({
  url = ARGV[2],
  headers = ARGV[3],
  header_names = cjson.decode(ARGV[4]),
  created_at = created_at,
  updated_at = tonumber(ARGV[5]),
  revision = revision,
}))
if old then return {0, revision} end
return {1, revision}
