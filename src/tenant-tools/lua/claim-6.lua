-- claim: offer the oldest queued calls of the given queues (tool names, or `~http`) that are due to one claimant,
-- each under a new offer id and a lease. It reads only the asked queues' indexes (includes/queue-key.lua), at most
-- `max` entries of each, so its cost does not grow with the calls of other tools the tenant has queued.
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] ready  KEYS[4] leased  KEYS[5] offers  KEYS[6] owed (sweep-10.lua)
-- ARGV[1] lease ms  ARGV[2] most calls  ARGV[3] worker id
-- ARGV[4] offer id prefix (random; the offer's index is appended)  ARGV[5..] queues
-- Due and lease times are of Redis's clock (includes/now.lua): `rec.lease` is now + ARGV[1].
-- Returns record (JSON), input (JSON text), owed triples, one per call offered: `owed` is a JSON array of the records
-- of the call's earlier attempts whose `tool_task.retried` is still owed (a sweeper died before writing it), which
-- the claimant writes before this attempt's `tool.started`; they stay owed until written.
--- @include "includes/queue-key"
--- @include "../../store/lua/includes/now"
local now = now_ms()
local max = tonumber(ARGV[2])
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
for i = 5, #ARGV do
  if not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    queues[#queues + 1] = ARGV[i]
  end
end
local out = {}
local n = 0
-- Each pass takes the oldest `max` due entries of each asked queue, oldest first over all of them (ties by queue and
-- call, as `ready`'s own order). An entry whose call is no longer queued is dropped; when a pass met one and offered
-- fewer than `max`, the next pass looks again (each pass drops what it met, so this ends).
local stale = true
while stale and n < max do
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
      out[#out + 1] = enc
      out[#out + 1] = redis.call('HGET', KEYS[2], call) or 'null'
      local owed = {}
      if rec.attempt > 1 then
        local fields = {}
        for a = 1, rec.attempt - 1 do fields[a] = call .. ' ' .. a end
        for _, v in ipairs(redis.call('HMGET', KEYS[6], unpack(fields))) do
          if v then owed[#owed + 1] = v end
        end
      end
      out[#out + 1] = '[' .. table.concat(owed, ',') .. ']'
      n = n + 1
    else
      stale = true
    end
  end
end
return out
