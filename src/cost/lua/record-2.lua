-- record: adds the counters of committed turns to their tenant's day and keeps the day USAGE_RETENTION_DAYS from
-- now, in one command (src/cost/spend.ts: the turns of one event-loop turn together). A turn marked by its session
-- and seq (the revision of the commit that billed it, kept in the session's meta field `spend_open` until recorded:
-- src/engine/commit.ts) is added only if that session's last recorded seq is lower, so a record sent again (a
-- takeover's, after its owner was killed before or after its own) counts it once.
-- KEYS[1] the day's hash (`q:{<tenant>}:usage:<YYYY-MM-DD>`)
-- KEYS[2] the tenant's recorded seqs (hash `q:{<tenant>}:spent`: session id -> last seq recorded)
-- ARGV[1] the TTL (s) of both
-- ARGV[2..] one group of 8 per turn, in order: session ('' : not marked, always added), seq, in, out, cw, cr, cost, nc
-- Returns the number of groups added.
local added = 0
local marked = false
-- The fresh turns' counters summed here, then one HINCRBY per field (a flush may carry hundreds of turns).
local fields = {'in', 'out', 'cw', 'cr', 'cost', 'nc'}
local sums = {0, 0, 0, 0, 0, 0}
for i = 2, #ARGV, 8 do
  local session = ARGV[i]
  local fresh = true
  if session ~= '' then
    marked = true
    local seq = tonumber(ARGV[i + 1])
    local last = tonumber(redis.call('HGET', KEYS[2], session) or '0') or 0
    if seq <= last then
      fresh = false
    else
      redis.call('HSET', KEYS[2], session, ARGV[i + 1])
    end
  end
  if fresh then
    added = added + 1
    for j = 1, 6 do sums[j] = sums[j] + tonumber(ARGV[i + 1 + j]) end
  end
end
for j = 1, 6 do
  -- As an integer's digits: Lua would write a number past 1e14 in its exponent form, which HINCRBY refuses.
  if sums[j] ~= 0 then redis.call('HINCRBY', KEYS[1], fields[j], string.format('%d', sums[j])) end
end
if added > 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
if marked then redis.call('EXPIRE', KEYS[2], ARGV[1]) end
return added
