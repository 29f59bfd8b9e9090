-- update: changes a schedule's fields if it exists, belongs to the tenant and is at the expected revision.
-- KEYS[1] the schedule (hash)  ARGV[1] tenant  ARGV[2] expected revision ('' any)
-- ARGV[3] fields to set (JSON object of strings)  ARGV[4] fields to delete (JSON array)
-- Returns {1, new revision}, {0, 0} when there is no such schedule of the tenant, {-1, current} on a mismatch.
local f = redis.call('HMGET', KEYS[1], 'tenant', 'revision')
if f[1] ~= ARGV[1] then return {0, 0} end
if ARGV[2] ~= '' and ARGV[2] ~= f[2] then return {-1, tonumber(f[2])} end
for k, v in pairs(cjson.decode(ARGV[3])) do redis.call('HSET', KEYS[1], k, v) end
for _, k in ipairs(cjson.decode(ARGV[4])) do redis.call('HDEL', KEYS[1], k) end
return {1, redis.call('HINCRBY', KEYS[1], 'revision', 1)}
