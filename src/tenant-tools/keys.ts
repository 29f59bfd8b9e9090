/**
 * Tenant tools and tool tasks in Redis. Every key of one tenant carries the hash tag `{tt:<tenant>}`, so in a Redis
 * Cluster a tenant's queue lives in one slot and one script claims, renews, completes and sweeps its tasks
 * atomically (a tenant's tasks never spread over slots; tenants do). The one global key, `tt:due`, is written in
 * its own command, never in a tenant's script.
 *
 * - `tt:{tt:T}:tools` HASH name → tool definition (JSON, the http secret sealed)
 * - `tt:{tt:T}:workers` ZSET `<tool> <worker_id>` → last claim or heartbeat (ms): the tenant's tools only, a day at
 *   most, the newest 1000 (seen-2.lua)
 * - `tt:{tt:T}:calls` HASH call → record (JSON of scalars: state, attempt, offer, lease, deadline, …); a call is
 *   `<session_id>:<tool_use_id>#<round>` (the round counts resumes of a failed step)
 * - `tt:{tt:T}:inputs` HASH call → the call's input (JSON text, never decoded in Lua)
 * - `tt:{tt:T}:results` HASH call → its result `{"content","is_error"}` (JSON text)
 * - `tt:{tt:T}:ready` ZSET `<queue> <call>` → claimable from (ms): calls waiting, oldest first; the queue is the
 *   tool's name (workers claim by it) or `~http` (the service's HTTP caller)
 * - `tt:{tt:T}:ready:<queue>` ZSET call → claimable from (ms): the same calls indexed by queue, written by the same
 *   scripts as `ready` (lua/includes/queue-key.lua), so a claim reads only the queues it asks for;
 *   `tt:{tt:T}:ready#indexed` says the tenant's calls queued before the index existed were indexed (claim-6.lua)
 * - `tt:{tt:T}:leased` ZSET call → lease expiry (ms)
 * - `tt:{tt:T}:deadline` ZSET call → when it times out (ms)
 * - `tt:{tt:T}:done` ZSET call → completed at (ms): results not yet delivered to their session (an outbox)
 * - `tt:{tt:T}:gc` ZSET call → when its delivered record (a tombstone against a second enqueue) may go
 * - `tt:{tt:T}:offers` HASH offer id (`tt_…`) → call
 * - `tt:{tt:T}:owed` HASH `<call> <attempt>` → the call's record as offered again after that attempt's lease was
 *   lost, or after it failed as an http tool's try (with its `failure`): its `tool_task.retried` event is owed to
 *   the session (written in another slot), until written (sweep-11.lua, release-9.lua; service.ts `payRetried`)
 * - `tt:{tt:T}:bytes` STRING the bytes the tenant's calls hold in `inputs` and `results`, the sum of their records'
 *   `bytes`: a part of the tenant's TENANT_MAX_BYTES count (src/store/storage-quota.ts), written by the scripts that
 *   write and delete those copies (lua/includes/held-bytes.lua); absent at 0
 * - `tt:http` SET of tenants that have calls of http tools queued (the service's HTTP caller looks at their
 *   queues; tasks.ts `httpIdle` takes a tenant off)
 * - `tt:due` ZSET tenant → when its queue needs a sweep (a lease or deadline falls due, an undelivered result, a
 *   tombstone's gc time); a tenant with none of those is not in it (tasks.ts `reschedule`); written and read by
 *   due-set-1.lua and due-claim-1.lua only
 *
 * Every time (ms) in these keys is of Redis's clock (src/store/lua/includes/now.lua), never a replica's.
 * - channel `tt:{tt:T}:wake`: published when a call is queued; long-polling claims wait on it
 * - channel `tt:{tt:T}:stop`: the offer id of an http tool's call settled as cancelled while leased (settle-9.lua);
 *   the replica whose HTTP caller runs that offer's try aborts it (http-stops.ts)
 */
const tag = (tenant: string) => `tt:{tt:${tenant}}`;

export const toolsKey = (tenant: string) => `${tag(tenant)}:tools`;
export const workersKey = (tenant: string) => `${tag(tenant)}:workers`;
export const wakeChannel = (tenant: string) => `${tag(tenant)}:wake`;
export const stopChannel = (tenant: string) => `${tag(tenant)}:stop`;
export const TASKS_DUE_KEY = 'tt:due';
export const HTTP_TENANTS_KEY = 'tt:http';

export const taskKeys = (tenant: string) => ({
  calls: `${tag(tenant)}:calls`,
  inputs: `${tag(tenant)}:inputs`,
  results: `${tag(tenant)}:results`,
  ready: `${tag(tenant)}:ready`,
  leased: `${tag(tenant)}:leased`,
  deadline: `${tag(tenant)}:deadline`,
  done: `${tag(tenant)}:done`,
  gc: `${tag(tenant)}:gc`,
  offers: `${tag(tenant)}:offers`,
  owed: `${tag(tenant)}:owed`,
  bytes: `${tag(tenant)}:bytes`,
});
