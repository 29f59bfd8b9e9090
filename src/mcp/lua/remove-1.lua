-- remove: forget a tenant's MCP server (If-Match checked).
-- KEYS[1] tenant's MCP servers (hash name -> record JSON with `revision`)
-- ARGV[1] name  ARGV[2] the revision If-Match expects ('' for none)
-- Returns {1, revision} removed, {0, 0} none of that name, {-2, current revision} when If-Match does not match.
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return {0, 0} end
local current = cjson.decode(old).revision
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= current then return {-2, current} end
redis.call('HDEL', KEYS[1], ARGV[1])
return {1, current}
