--- now_ms: Redis's own clock (TIME), in ms. A lease or due time that replicas compare (a run's due time in
--- `runs:due`, a schedule's pending lease, a webhook message's claim, a tool task's lease, deadline and due times)
--- is stored and compared in this clock, never a replica's Date.now(): the replicas' clocks may disagree, and one
--- ahead by more than a lease would take live leases for lapsed (a tool run twice), one behind would renew into the
--- past. Callers pass durations and get the times back. A script's keys share one hash tag, so one node's clock
--- serves all of them.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
