--- The key of one queue's index beside a tenant's `ready` ZSET: `<ready>:<queue>` (ZSET call -> claimable from, ms).
--- Every script that adds to or removes from `ready` does the same to the call's queue index, in the same script,
--- so a claim looks only at the queues it asks for (O(queues asked), not O(calls queued)). The key is built from
--- `ready`'s name: it carries the same hash tag, so it lives in the tenant's slot.
local function queue_key(ready, queue)
  return ready .. ':' .. queue
end
