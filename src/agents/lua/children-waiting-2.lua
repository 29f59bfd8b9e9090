-- children-waiting: appends `children.waiting` to a parent's event log when the list of its waiting descendants
-- changed since the last one written, and only then: the fingerprint of the list last told is kept in the parent's
-- meta hash (`cw_fp`), so a sweep that runs twice (two replicas, a retry after a crash) writes one event per change.
-- An absent field stands for the empty list (no event until something waits).
-- KEYS[1] the parent's meta (hash)  KEYS[2] its event log (stream)
-- ARGV[1] fingerprint of the list ('' when none waits)  ARGV[2] event data (JSON)  ARGV[3] pub/sub channel
-- ARGV[4] most entries kept  ARGV[5] `at` (ms)  ARGV[6] notice size limit (bytes)  ARGV[7] most bytes kept
-- Returns 1 when the event was written, 0 when the list is the one last told (or the session is gone).
--- @include "../../store/lua/includes/notice"
--- @include "../../store/lua/includes/event-log"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local cur = redis.call('HGET', KEYS[1], 'cw_fp') or ''
if cur == ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'cw_fp', ARGV[1])
notice_before(KEYS[2], KEYS[1])
local id = log_xadd(KEYS[2], 'children.waiting', ARGV[2], nil, ARGV[5])
notice_add(tonumber(ARGV[6]), id, 'children.waiting', ARGV[5], '0', ARGV[2])
log_trim(KEYS[2], KEYS[1], tonumber(ARGV[4]), tonumber(ARGV[7]))
notice_publish(ARGV[3])
return 1
