--- now_ms: Redis's own clock (TIME), in ms. Every time a tool-task script stores or compares (a lease's expiry, a
--- call's ready, deadline, done and gc times, the sweeper's `tt:due`) is of this clock, never a replica's
--- Date.now(): the replicas' clocks may disagree, and one ahead by more than a lease would take every other
--- replica's leases as lapsed (the tool run twice). A tenant's keys share one hash tag, so one node's clock serves
--- all of its scripts; callers pass durations, and get the times back from the scripts.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
