-- sweep: a tenant's queue, due: expired leases (offered again with the next attempt, or failed after the last),
-- calls past their deadline (failed), and tombstones past their gc time (gone, with their offers).
-- KEYS[1] calls  KEYS[2] inputs  KEYS[3] results  KEYS[4] ready  KEYS[5] leased  KEYS[6] deadline  KEYS[7] done
-- KEYS[8] gc  KEYS[9] offers
-- ARGV[1] now ms  ARGV[2] most entries handled per kind  ARGV[3] wake channel
-- Returns: when the queue next needs a sweep, live then gc (includes/next-due.lua: ms, -1 for none), then kind,
-- record (JSON) pairs: 'retried' (offered again) or 'failed' (its `is_error` result waits in `done`).
--- @include "includes/next-due"
--- @include "includes/queue-key"
local now = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local out = {}
local function fail(call, rec, text)
  rec.state = 'done'
  redis.call('HSET', KEYS[1], call, cjson.encode(rec))
  redis.call('HSET', KEYS[3], call, cjson.encode({content = text, is_error = true}))
  redis.call('ZADD', KEYS[7], now, call)
  out[#out + 1] = 'failed'
  out[#out + 1] = cjson.encode(rec)
end
for _, call in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[5], call)
  local raw = redis.call('HGET', KEYS[1], call)
  if raw then
    local rec = cjson.decode(raw)
    if rec.state == 'leased' and rec.lease <= now then
      if rec.attempt >= rec.max_attempts then
        redis.call('ZREM', KEYS[6], call)
        -- The last offer lost its lease as the others did: its worker is answered 'lost', not 'completed'.
        rec.offer = ''
        fail(call, rec, 'Error: no worker answered: the lease of each of its ' .. rec.attempt ..
          ' attempts expired (max_attempts ' .. rec.max_attempts .. ')')
      else
        rec.state = 'queued'
        rec.offer = ''
        local enc = cjson.encode(rec)
        redis.call('HSET', KEYS[1], call, enc)
        redis.call('ZADD', KEYS[4], rec.queued_at, rec.queue .. ' ' .. call)
        redis.call('ZADD', queue_key(KEYS[4], rec.queue), rec.queued_at, call)
        redis.call('PUBLISH', ARGV[3], rec.queue)
        out[#out + 1] = 'retried'
        out[#out + 1] = enc
      end
    elseif rec.state == 'leased' then
      redis.call('ZADD', KEYS[5], rec.lease, call)
    end
  end
end
for _, call in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[6], call)
  local raw = redis.call('HGET', KEYS[1], call)
  if raw then
    local rec = cjson.decode(raw)
    if rec.state == 'queued' or rec.state == 'leased' then
      redis.call('ZREM', KEYS[4], rec.queue .. ' ' .. call)
      redis.call('ZREM', queue_key(KEYS[4], rec.queue), call)
      redis.call('ZREM', KEYS[5], call)
      fail(call, rec, 'Error: no worker answered within ' .. rec.timeout_ms .. ' ms (the tool\'s timeout_ms)')
    end
  end
end
for _, call in ipairs(redis.call('ZRANGEBYSCORE', KEYS[8], '-inf', now, 'LIMIT', 0, limit)) do
  redis.call('ZREM', KEYS[8], call)
  local raw = redis.call('HGET', KEYS[1], call)
  if raw then
    local rec = cjson.decode(raw)
    for offer in string.gmatch(rec.offers, '%S+') do redis.call('HDEL', KEYS[9], offer) end
    redis.call('HDEL', KEYS[1], call)
    redis.call('HDEL', KEYS[2], call)
    redis.call('HDEL', KEYS[3], call)
  end
end
local live, gc = next_due(KEYS[5], KEYS[6], KEYS[7], KEYS[8])
table.insert(out, 1, gc)
table.insert(out, 1, live)
return out
