-- lapsed-replicas: the replicas that said they were alive (replica-alive-1.lua) and stopped saying it.
-- KEYS[1] the replicas' liveness (zset member: the replica's id -> the deadline, in ms of Redis's clock)
-- ARGV[1] the most ids answered
-- Returns the ids whose deadline passed, by Redis's clock; writes nothing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[1]))
