-- settle: record the outcome of one attempt.
-- KEYS[1] webhook (hash; `pending_bytes` kept with the payloads)  KEYS[2] due queue  KEYS[3] payloads  KEYS[4] attempts  KEYS[5] in flight
-- KEYS[6] deliveries log (list, newest first)  KEYS[7] settled (zset msg -> ms)
-- ARGV[1] msg id  ARGV[2] '1' when the endpoint answered 2xx  ARGV[3] retry delay ms
-- ARGV[4] retry for ms (from the first attempt)  ARGV[5] disable after ms of failures
-- ARGV[6] log entry (JSON object; `outcome` is added)  ARGV[7] log length  ARGV[8] settled ids kept for ms
-- ARGV[9] most settled ids kept
-- `now` is Redis's clock (includes/now.lua), the one claim-5.lua compares due times with: a replica behind does not
-- make a retry due at once, nor one ahead give up or disable early.
-- Outcomes: delivered | retrying | gave_up (retried for ARGV[4]) | disabled (the endpoint failed for ARGV[5]: its
-- outbox is dropped) | stale (the attempt's lease had expired and another replica took the message over).
-- The endpoint fails since the first attempt of the first message that failed after its last delivery
-- (`delivered_at`), not since that attempt settled: with ARGV[4] = ARGV[5] (the contract's 24 h for both), a
-- message that keeps failing disables its endpoint no later than it is given up, however long attempts take.
-- Returns {outcome, next due ms or -1, now ms}.
--- @include "../../store/lua/includes/now"
local now = now_ms()
local id = ARGV[1]
local outcome
-- A payload leaves the outbox: its bytes leave `pending_bytes` (never below 0: outboxes older than the field).
local function drop_payload()
  local body = redis.call('HGET', KEYS[3], id)
  if body and tonumber(redis.call('HINCRBY', KEYS[1], 'pending_bytes', -#body)) < 0 then
    redis.call('HSET', KEYS[1], 'pending_bytes', 0)
  end
  redis.call('HDEL', KEYS[3], id)
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'gone', '-1'} end
if not redis.call('ZSCORE', KEYS[5], id) then
  outcome = 'stale'
elseif ARGV[2] == '1' then
  redis.call('ZREM', KEYS[5], id)
  drop_payload()
  redis.call('HDEL', KEYS[4], id)
  redis.call('ZADD', KEYS[7], now, id)
  redis.call('HDEL', KEYS[1], 'failing_since')
  redis.call('HSET', KEYS[1], 'delivered_at', string.format('%d', now))
  outcome = 'delivered'
else
  redis.call('ZREM', KEYS[5], id)
  local a = redis.call('HGET', KEYS[4], id) or '0:0'
  local first = tonumber(string.sub(a, string.find(a, ':', 1, true) + 1))
  if first == 0 then first = now end
  local since = tonumber(redis.call('HGET', KEYS[1], 'failing_since') or '')
  if not since then
    since = math.max(first, tonumber(redis.call('HGET', KEYS[1], 'delivered_at') or '0'))
    redis.call('HSET', KEYS[1], 'failing_since', string.format('%d', since))
  end
  if now - since >= tonumber(ARGV[5]) then
    -- A change of the resource (its `disabled`): a new revision, and `updated_at` with it. `failing_since` and
    -- `delivered_at` are its deliveries' state, which moves neither (a PATCH read before them still holds).
    redis.call('HSET', KEYS[1], 'disabled', '1', 'updated_at', string.format('%d', now))
    redis.call('HINCRBY', KEYS[1], 'revision', 1)
    redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
    redis.call('HSET', KEYS[1], 'pending_bytes', 0)
    outcome = 'disabled'
  elseif now - first >= tonumber(ARGV[4]) then
    drop_payload()
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZADD', KEYS[7], now, id)
    outcome = 'gave_up'
  else
    redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), id)
    outcome = 'retrying'
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - tonumber(ARGV[8]))
local extra = redis.call('ZCARD', KEYS[7]) - tonumber(ARGV[9])
if extra > 0 then redis.call('ZREMRANGEBYRANK', KEYS[7], 0, extra - 1) end
local entry = cjson.decode(ARGV[6])
entry.outcome = outcome
redis.call('LPUSH', KEYS[6], cjson.encode(entry))
redis.call('LTRIM', KEYS[6], 0, tonumber(ARGV[7]) - 1)
local nf = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
local nq = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local next = -1
if nq[2] then next = tonumber(nq[2]) end
if nf[2] and (next < 0 or tonumber(nf[2]) < next) then next = tonumber(nf[2]) end
return {outcome, string.format('%d', next), string.format('%d', now)}
