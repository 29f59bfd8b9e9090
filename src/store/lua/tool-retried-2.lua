-- tool-retried: a tenant tool call's `tool_task.retried` event (its attempt's lease was lost, or its http try failed),
-- written at most once per attempt whoever writes it: the sweeper (or the HTTP caller, src/tenant-tools/lua/
-- release-9.lua) that offered the call again, or, should it die first, the next claimant
-- of the call or the next sweep on any replica (the debt is kept in the tenant's queue, src/tenant-tools/lua/sweep-11.lua,
-- another slot: so two of them may write it at once, or one again after its first write landed and it died).
-- Written only while the session's step waits for the call's result (its `reported:<id>` field is '', as
-- src/store/pending.ts `pendingFields` writes it for a call without a result): a debt paid late, after the call's
-- result, or once the session moved on, has no place in the log any more. The meta field `retried:<id>`
-- (`<round> <attempt>`: the call's round, src/tenant-tools/task-record.ts `taskCallId`, and the last attempt told of)
-- says which were written; it goes with the step (includes/blocks.lua `blocks_drop_results`).
-- KEYS[1] meta  KEYS[2] events (stream)
-- ARGV[1] pub/sub channel  ARGV[2] most entries kept  ARGV[3] `at` (ms)  ARGV[4] notice size limit (bytes)
-- ARGV[5] most bytes kept (includes/event-log.lua)  ARGV[6] tool_use_id  ARGV[7] round  ARGV[8] attempt lost
-- ARGV[9] event type  ARGV[10] event data
-- Returns 1 when written, 0 when not (written before, or the session no longer waits for the call).
--- @include "includes/notice"
--- @include "includes/event-log"
if redis.call('HGET', KEYS[1], 'reported:' .. ARGV[6]) ~= '' then return 0 end
local field = 'retried:' .. ARGV[6]
local round, attempt = tonumber(ARGV[7]), tonumber(ARGV[8])
local told = redis.call('HGET', KEYS[1], field)
if told then
  local sp = string.find(told, ' ', 1, true)
  local r, a = tonumber(string.sub(told, 1, sp - 1)), tonumber(string.sub(told, sp + 1))
  if r > round or (r == round and a >= attempt) then return 0 end
end
redis.call('HSET', KEYS[1], field, round .. ' ' .. attempt)
notice_before(KEYS[2], KEYS[1])
local id = log_xadd(KEYS[2], ARGV[9], ARGV[10], nil, ARGV[3])
notice_add(tonumber(ARGV[4]), id, ARGV[9], ARGV[3], '0', ARGV[10])
log_trim(KEYS[2], KEYS[1], tonumber(ARGV[2]), tonumber(ARGV[5]))
notice_publish(ARGV[1])
return 1
