-- claim: take due messages of one endpoint for delivery, within its concurrency limit across all replicas.
-- KEYS[1] webhook (hash)  KEYS[2] due queue (zset)  KEYS[3] payloads (hash)  KEYS[4] attempts (hash)
-- KEYS[5] in flight (zset msg -> lease expiry ms)
-- ARGV[1] lease ms  ARGV[2] concurrency limit  ARGV[3] most messages this call takes (the claiming process's room:
-- its own and its tenant's caps there)
-- A message in flight whose lease expired (its replica died or hung) is claimed again first: at least once. Lease
-- expiries, due times and first attempts are of Redis's clock (includes/now.lua), as settle-7.lua's: a replica whose
-- clock runs ahead does not take a live claim for expired (the message delivered twice at once).
-- Returns {'gone'} | {'disabled'} | {'ok', next due ms (-1: nothing left), url, secret, tenant, msg id, attempt,
-- first attempt ms, body, msg id, ...}. With every slot taken, `next` is the earliest lease expiry: a settle
-- frees a slot and nudges the endpoint before that.
--- @include "../../store/lua/includes/now"
if redis.call('EXISTS', KEYS[1]) == 0 then return {'gone'} end
local w = redis.call('HMGET', KEYS[1], 'disabled', 'url', 'secret', 'tenant')
if w[1] == '1' then return {'disabled'} end
local now = now_ms()
local expiry = now + tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local ids = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, limit)
local active = redis.call('ZCARD', KEYS[5]) - #ids
local slots = math.min(limit - active, tonumber(ARGV[3]))
local take = {}
for i = 1, math.min(#ids, math.max(slots, 0)) do take[#take + 1] = ids[i] end
slots = slots - #take
if slots > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, slots)
  for _, id in ipairs(due) do
    redis.call('ZREM', KEYS[2], id)
    take[#take + 1] = id
  end
end
local out = {'ok', -1, w[2] or '', w[3] or '', w[4] or ''}
for _, id in ipairs(take) do
  local body = redis.call('HGET', KEYS[3], id)
  if body then
    local a = redis.call('HGET', KEYS[4], id) or '0:0'
    local sep = string.find(a, ':', 1, true)
    local attempt = tonumber(string.sub(a, 1, sep - 1)) + 1
    local first = tonumber(string.sub(a, sep + 1))
    if first == 0 then first = now end
    redis.call('HSET', KEYS[4], id, attempt .. ':' .. string.format('%d', first))
    redis.call('ZADD', KEYS[5], expiry, id)
    out[#out + 1] = id
    out[#out + 1] = attempt
    out[#out + 1] = string.format('%d', first)
    out[#out + 1] = body
  else
    redis.call('ZREM', KEYS[5], id)
  end
end
local nf = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')
local nq = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
local next = -1
if nf[2] then next = tonumber(nf[2]) end
if nq[2] and redis.call('ZCARD', KEYS[5]) < limit and (next < 0 or tonumber(nq[2]) < next) then next = tonumber(nq[2]) end
out[2] = string.format('%d', next)
return out
