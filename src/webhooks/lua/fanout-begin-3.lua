-- fanout-begin: take the session's webhook fan-out lease and read the events after its cursor.
-- KEYS[1] the session's event log (stream)  KEYS[2] its fan-out state (hash: c = cursor, t = tenant)
-- KEYS[3] its fan-out lease (string)
-- ARGV[1] owner  ARGV[2] lease ms  ARGV[3] most events to read
-- Returns {'busy'} when another process holds the lease, else {'ok', cursor, tenant, entries} with entries as
-- XRANGE gives them (after the cursor, oldest first).
local holder = redis.call('GET', KEYS[3])
if holder and holder ~= ARGV[1] then return {'busy'} end
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
local st = redis.call('HMGET', KEYS[2], 'c', 't')
local cursor = st[1] or '0-0'
local rows = redis.call('XRANGE', KEYS[1], '(' .. cursor, '+', 'COUNT', ARGV[3])
return {'ok', cursor, st[2] or '', rows}
