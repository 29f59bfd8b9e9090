-- replica-alive: a replica says it is alive (src/quotas/slots.ts), and entries lapsed long ago are forgotten.
-- KEYS[1] the replicas' liveness (zset member: the replica's id -> the deadline, in ms of Redis's clock)
-- ARGV[1] the replica's id  ARGV[2] how long it counts as alive (ms)  ARGV[3] how long a lapsed entry is kept (ms)
-- Returns 1. Redis's own clock (TIME) on both sides (here and in lapsed-replicas-1.lua), so the replicas' clocks
-- may disagree. A lapsed entry is kept for ARGV[3] (longer than any slot of its replica can live by its own
-- expiry), so each of its slots is dropped either by the lapse or by its expiry.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]))
return 1
