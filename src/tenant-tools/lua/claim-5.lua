-- claim: offer the oldest queued calls of the given queues (tool names, or `~http`) that are due to one claimant,
-- each under a new offer id and a lease.
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] ready  KEYS[4] leased  KEYS[5] offers
-- ARGV[1] now ms  ARGV[2] lease ms  ARGV[3] most calls  ARGV[4] worker id  ARGV[5] most queued calls looked at
-- ARGV[6] offer id prefix (random; the offer's index is appended)  ARGV[7..] queues
-- Returns record (JSON), input (JSON text) pairs, one per call offered.
local want = {}
for i = 7, #ARGV do want[ARGV[i]] = true end
local now = tonumber(ARGV[1])
local max = tonumber(ARGV[3])
local out = {}
local n = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[5]))) do
  if n >= max then break end
  local sp = string.find(m, ' ', 1, true)
  if sp and want[string.sub(m, 1, sp - 1)] then
    local call = string.sub(m, sp + 1)
    redis.call('ZREM', KEYS[3], m)
    local raw = redis.call('HGET', KEYS[1], call)
    if raw then
      local rec = cjson.decode(raw)
      if rec.state == 'queued' then
        local offer = ARGV[6] .. tostring(n)
        rec.attempt = rec.attempt + 1
        rec.state = 'leased'
        rec.offer = offer
        rec.offers = rec.offers .. ' ' .. offer
        rec.worker = ARGV[4]
        rec.lease = now + tonumber(ARGV[2])
        local enc = cjson.encode(rec)
        redis.call('HSET', KEYS[1], call, enc)
        redis.call('ZADD', KEYS[4], rec.lease, call)
        redis.call('HSET', KEYS[5], offer, call)
        out[#out + 1] = enc
        out[#out + 1] = redis.call('HGET', KEYS[2], call) or 'null'
        n = n + 1
      end
    end
  end
end
return out
