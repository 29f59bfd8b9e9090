-- claim: offer the oldest queued calls of the given queues (tool names, or `~http`) that are due to one claimant,
-- each under a new offer id and a lease. It reads only the asked queues' indexes (includes/queue-key.lua), at most
-- `max` entries of each, so its cost does not grow with the calls of other tools the tenant has queued.
-- Its answer is bounded by bytes too (ARGV[5], TOOL_TASK_CLAIM_MAX_BYTES): a call whose input would take the answer
-- past it is not taken (its entries stay as they are: it is the oldest left, for the next claim), unless it is the
-- first, so a call larger than the bound is still offered, alone. The input's size is read (HSTRLEN) before the call
-- is taken, so Redis never builds an answer of `max` inputs of BODY_LIMIT each (a claim script then ran for seconds,
-- and the health guard took Redis for down for every tenant).
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] ready  KEYS[4] leased  KEYS[5] offers  KEYS[6] owed (sweep-11.lua)
-- ARGV[1] lease ms  ARGV[2] most calls  ARGV[3] worker id
-- ARGV[4] offer id prefix (random; the offer's index is appended)  ARGV[5] most bytes of the answer  ARGV[6..] queues
-- Due and lease times are of Redis's clock (includes/now.lua): `rec.lease` is now + ARGV[1].
-- Returns `more` (1 when the byte bound left a due call of the queues behind, else 0), then record (JSON), input
-- (JSON text), owed triples, one per call offered: `owed` is a JSON array of the records of the call's earlier
-- attempts whose `tool_task.retried` is still owed (a sweeper died before writing it), which the claimant writes
-- before this attempt's `tool.started`; they stay owed until written.
--- @include "includes/queue-key"
--- @include "../../store/lua/includes/now"
local now = now_ms()
local max = tonumber(ARGV[2])
local budget = tonumber(ARGV[5])
-- A tenant's calls queued before the indexes existed (an upgrade): indexed once, here, from `ready` (whose bound,
-- TOOL_TASKS_MAX_PER_TENANT, bounds this one scan); from then on every script keeps both. `#` is in no queue name.
local flag = KEYS[3] .. '#indexed'
if redis.call('EXISTS', flag) == 0 then
  local all = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    local sp = string.find(all[i], ' ', 1, true)
    if sp then
      redis.call('ZADD', queue_key(KEYS[3], string.sub(all[i], 1, sp - 1)), all[i + 1], string.sub(all[i], sp + 1))
    end
  end
  redis.call('SET', flag, '1')
end
local queues = {}
local seen = {}
for i = 6, #ARGV do
  if not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    queues[#queues + 1] = ARGV[i]
  end
end
local out = {0}
local n = 0
-- Bytes of the answer so far (its records, inputs and owed arrays), and whether the bound stopped it.
local bytes = 0
local more = false
-- Each pass takes the oldest `max` due entries of each asked queue, oldest first over all of them (ties by queue and
-- call, as `ready`'s own order). An entry whose call is no longer queued is dropped; when a pass met one and offered
-- fewer than `max`, the next pass looks again (each pass drops what it met, so this ends).
local stale = true
while stale and n < max and not more do
  stale = false
  local cands = {}
  for _, q in ipairs(queues) do
    local got = redis.call('ZRANGEBYSCORE', queue_key(KEYS[3], q), '-inf', now, 'WITHSCORES', 'LIMIT', 0, max - n)
    for i = 1, #got, 2 do cands[#cands + 1] = {tonumber(got[i + 1]), q, got[i]} end
  end
  table.sort(cands, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    if a[2] ~= b[2] then return a[2] < b[2] end
    return a[3] < b[3]
  end)
  for _, c in ipairs(cands) do
    if n >= max then break end
    local q, call = c[2], c[3]
    if n > 0 and bytes + redis.call('HSTRLEN', KEYS[2], call) > budget then
      more = true
      break
    end
    redis.call('ZREM', KEYS[3], q .. ' ' .. call)
    redis.call('ZREM', queue_key(KEYS[3], q), call)
    local raw = redis.call('HGET', KEYS[1], call)
    local rec = raw and cjson.decode(raw)
    if rec and rec.state == 'queued' then
      local offer = ARGV[4] .. tostring(n)
      rec.attempt = rec.attempt + 1
      rec.state = 'leased'
      rec.offer = offer
      rec.offers = rec.offers .. ' ' .. offer
      rec.worker = ARGV[3]
      rec.lease = now + tonumber(ARGV[1])
      local enc = cjson.encode(rec)
      redis.call('HSET', KEYS[1], call, enc)
      redis.call('ZADD', KEYS[4], rec.lease, call)
      redis.call('HSET', KEYS[5], offer, call)
      local input = redis.call('HGET', KEYS[2], call) or 'null'
      out[#out + 1] = enc
      out[#out + 1] = input
      local owed = {}
      if rec.attempt > 1 then
        local fields = {}
        for a = 1, rec.attempt - 1 do fields[a] = call .. ' ' .. a end
        for _, v in ipairs(redis.call('HMGET', KEYS[6], unpack(fields))) do
          if v then owed[#owed + 1] = v end
        end
      end
      local owedText = '[' .. table.concat(owed, ',') .. ']'
      out[#out + 1] = owedText
      bytes = bytes + #enc + #input + #owedText
      n = n + 1
    else
      stale = true
    end
  end
end
if more then out[1] = 1 end
return out
