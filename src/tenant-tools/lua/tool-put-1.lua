-- tool-put: register or replace a tenant tool, within the tenant's limit, bumping its revision (If-Match checked).
-- KEYS[1] the tenant's tools (hash name -> definition JSON, with `revision`)
-- ARGV[1] name  ARGV[2] definition JSON without `revision` (an object: `revision` is spliced in before its `}`)
-- ARGV[3] most tools per tenant  ARGV[4] the revision If-Match expects ('' for none)
-- Returns {1, revision} created, {0, revision} replaced, {-1, 0} at the tenant's limit, {-2, current revision}
-- (0: none) when If-Match does not match.
local old = redis.call('HGET', KEYS[1], ARGV[1])
local current = 0
if old then current = tonumber(cjson.decode(old).revision) or 1 end
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= current then return {-2, current} end
if not old and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return {-1, 0} end
local revision = current + 1
redis.call('HSET', KEYS[1], ARGV[1], string.sub(ARGV[2], 1, -2) .. ',"revision":' .. revision .. '}')
if old then return {0, revision} end
return {1, revision}
