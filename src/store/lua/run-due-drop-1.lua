-- run-due-drop: a run's end drops its due entry (`runs:due`) only while the entry holds the due time that run set
-- last. Another time was set by someone else — a message that made the session `running` again after the run's last
-- commit (`RunQueue.start`), the next run's claim (`keep`) — and that entry stays: dropped, a next run whose replica
-- died before its next heartbeat would be left with nothing to claim it.
-- KEYS[1] runs:due (ZSET session id -> ms)
-- ARGV[1] session id  ARGV[2] the due time the run set last (ms, Redis's clock, as run-due-set-1.lua returned it)
-- Returns 1 when dropped, 0 when the entry is gone or holds another time.
local at = redis.call('ZSCORE', KEYS[1], ARGV[1])
if at and tonumber(at) == tonumber(ARGV[2]) then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0
