import type { Redis, Cluster } from 'ioredis';
import { quotaExceeded, type QuotaExceeded } from '../errors.js';
import type { ApplyOps, Guard } from './apply-ops.js';
import { CounterBatch } from './counter-batch.js';
import { taskKeys } from '../tenant-tools/keys.js';

/**
 * The per-tenant storage quota (TENANT_MAX_BYTES). Each write of a session counts the bytes it adds — the messages
 * and iteration records it pushes, the follow-ups it queues, the events it logs, a compaction's summary, and the
 * whole state at creation — into the session's `bytes` field, in the same script as the write (an `hincr` of the
 * apply), and then into the tenant's counter `t:{tenant}:bytes` (one INCRBY: a global key cannot join the session's
 * script in a Redis Cluster). A destroy takes the session's `bytes` back off, once, even when its process dies after
 * its script (`giveBack`). The count is an upper bound of what the tenant keeps (events and history trimmed later are
 * not subtracted), shared by every replica.
 *
 * Every count is in UTF-8 bytes, what Redis stores: `Buffer.byteLength` here (a CJK character is 3 bytes, an emoji 4,
 * where a string's `.length` says 1 and 2), Lua's `#`, HSTRLEN and STRLEN in the scripts, so that what a shrink or a
 * delete gives back is what was charged. (What the event log takes outside an apply is not counted — the stream
 * deltas a run's relay writes as they come (store.ts `appendEvents`), bounded by EVENT_LOG_MAX_BYTES instead; those
 * its turn's commit carries are, as its events.)
 *
 * What a write rewrites counts too, by how much it grows (new length less old, negative when it shrinks): the fields
 * it sets after the create (a PATCH's `params` or `metadata`, the stored step `pending`, its `result:*` fields), the
 * history messages and records it replaces (an approval's edited input, a history's replacement), less the results a
 * cleared step drops, plus the results turn they become. Only the script sees the old lengths, so it weighs them there
 * (apply-8.lua, Storage: an HSTRLEN or LINDEX before each HSET or LSET, no round trip), adds them to the session's
 * `bytes` and returns them, and the store adds them to the tenant's counter with the rest. A session's delete gives
 * them back with its `bytes`, so the tenant's count returns to what it was before the create whatever the session
 * did. (A session written before these were counted gives back, as it shrinks or drops them, bytes it was never
 * charged: once, at most its step and the fields PATCHed since its create. Likewise one whose content was counted in
 * UTF-16 units, before the count was in bytes: what a rewrite shrinks is weighed in bytes, so it may give back more
 * than its create charged for it, up to two thirds of the bytes of the multi-byte characters it drops; its delete
 * gives back exactly its `bytes`, what its writes counted.)
 *
 * A session's client tokens (client-tokens.ts) count too: a token's record and its events, in the session's `bytes`
 * (client-token-mint-2.lua); a mint is refused as a client's write is, a revoke never.
 *
 * A tenant tool's call (a tool task, src/tenant-tools/) counts too while the queue keeps a copy of its input and
 * result: the queue's scripts count those bytes in `tt:{tt:tenant}:bytes` (in the queue's slot, so in the scripts
 * that write and delete the copies: src/tenant-tools/lua/includes/held-bytes.lua) from its enqueue until it is
 * settled (delivered, cancelled, its session deleted, failed at its deadline and then delivered). The tenant's count
 * is the sum of the two counters. A call queued is a run's write: counted, never refused.
 *
 * A client's write that adds content (create, follow-up, result, an approval, a PATCH…: every apply without a run's
 * fence) is refused with 429 `quota_exceeded` (`details.quota: "storage_bytes"`) once the tenant's count reaches the
 * limit, and so is one whose rewrites would take the count past it (`room`, weighed by the script before it writes);
 * a run's own commits are not (a turn's size is bounded by MAX_TURN_BYTES), so a run in flight ends normally.
 * Nor is what stops spending or frees storage, so a tenant at its limit can always stop its runs and get below it: a
 * cancel (its `session.cancel_requested` write and its commit, `storageCap: false`), a call's denial and a token's
 * revoke are counted all the same (each adds bounded events); the deletes (sessions, schedules, tools, webhooks) and a
 * schedule's pause add nothing to the count. A schedule's PATCH that grows its create body is refused.
 *
 * A schedule's create body counts in `t:{tenant}:bytes` too, through the tenant's ledger of its schedules' bytes in
 * the same slot (src/schedules/charges.ts): charged in the script that checks the limit (`ceiling`), settled to the
 * record after each write, and by any replica's sweep after a write whose process died between its steps.
 */
export const storageKey = (tenant: string) => `t:{${tenant}}:bytes`;

/**
 * ZSET of the deletes whose bytes the tenant was given back (storage-give-back-2.lua), each `<session id>/<id of its
 * session.deleted event>` scored by its time, kept GIVEN_KEEP_MS: what makes a give-back run twice (the deleting
 * process and a sweep) count once.
 */
export const givenKey = (tenant: string) => `t:{${tenant}}:given`;

/**
 * How long a delete's record of the bytes it owes (keys.ts `giveBack`) is kept for a sweep to give them back should
 * its process die first (ms): far longer than a sweep takes to reach its mark (every DEADLINE_SWEEP_MS; a mark of a
 * delete still under way is looked at again for 5 minutes, UNINDEX_GRACE_MS), not tied to DELETED_LOG_TTL_MS, which
 * replicas may set differently (see GIVEN_KEEP_MS).
 */
export const GIVE_BACK_TTL_MS = 15 * 60_000;

/** A delete's record of what it owes its tenant's storage count: a value of keys.ts `giveBack`. */
export interface GiveBackRecord {
  bytes: number;
  tenant: string;
}

/**
 * The format of a `giveBack` value, `<bytes>:<tenant>`: written by src/store/lua/destroy-11.lua (`raw .. ':' ..
 * ARGV[5]`), which this pair follows. The tenant is last and may hold `:`; the bytes hold none.
 */
export const encodeGiveBack = (r: GiveBackRecord): string => `${r.bytes}:${r.tenant}`;

/** A `giveBack` value decoded (`encodeGiveBack`); null when not of that form. */
export function decodeGiveBack(value: string): GiveBackRecord | null {
  const colon = value.indexOf(':');
  const bytes = value.slice(0, colon);
  const tenant = value.slice(colon + 1);
  if (colon < 0 || tenant === '' || !/^-?\d+$/.test(bytes)) return null;
  return { bytes: Number(bytes), tenant };
}

/**
 * How long `givenKey` keeps a delete given back (ms): past the record's expiry by a margin for the clocks of the
 * session's and the tenant's Redis nodes (a Cluster), and one constant for every caller, since a delete older than it
 * is refused by the same rule that trims it (a caller trimming by a shorter span than another's refusal would let
 * that one give back twice).
 */
export const GIVEN_KEEP_MS = GIVE_BACK_TTL_MS + 60_000;

/**
 * UTF-8 bytes `ops` adds to a session that the store can see (0 for a write that only changes state); what it rewrites
 * is weighed by the script (`rewrites`).
 */
function addedBytes(ops: ApplyOps, guard: Guard): number {
  let n = 0;
  for (const m of ops.push_msgs ?? []) n += Buffer.byteLength(m);
  for (const m of ops.push_iters ?? []) n += Buffer.byteLength(m);
  for (const q of ops.queue_push ?? []) n += Buffer.byteLength(q);
  for (const e of ops.events ?? []) n += Buffer.byteLength(e[1]);
  if (ops.compact) n += Buffer.byteLength(ops.compact.summary);
  if (guard.create) for (const v of Object.values(ops.hset ?? {})) n += Buffer.byteLength(v);
  return n;
}

/**
 * Whether `ops` rewrite fields or history elements of a session that exists, whose growth the script weighs (a
 * create's fields are counted whole by `addedBytes`).
 */
function rewrites(ops: ApplyOps | undefined, guard: Guard): boolean {
  if (!ops || guard.create) return false;
  const fields = ops.hset !== undefined && Object.keys(ops.hset).length > 0;
  return fields || !!ops.lset_msgs?.length || !!ops.lset_iters?.length || rewrites(ops.queue?.none, guard);
}

const storageExceeded = (max: number) =>
  quotaExceeded('storage_bytes', max, 'bytes stored (TENANT_MAX_BYTES)');

export class StorageQuota {
  /** Bytes on their way to their tenant's counter: the writes of one event-loop turn in one INCRBY per tenant. */
  private readonly added: CounterBatch;

  constructor(
    private readonly redis: Redis | Cluster,
    /** TENANT_MAX_BYTES; 0: no limit (the bytes are counted all the same). */
    private readonly maxBytes: number,
  ) {
    this.added = new CounterBatch((key, sums) => this.redis.incrby(key, sums.get('bytes') ?? 0));
  }

  /**
   * Throws 429 when a client's write of `tenant` would add bytes while the tenant is at its limit (`refuse` false: a
   * write the service makes on its own, counted and never refused, as a run's commits are). Returns the bytes it adds
   * (`addedBytes`) and, for a client's write that rewrites (`rewrites`), the bytes the tenant may still store after
   * them: the script refuses the write if what it rewrites grows by more (Guard `room`; one read of the count, the
   * one a write that adds bytes makes anyway).
   */
  async check(
    tenant: string,
    ops: ApplyOps,
    guard: Guard,
    refuse = true,
  ): Promise<{ added: number; room?: number }> {
    const added = addedBytes(ops, guard);
    if (!refuse || this.maxBytes <= 0 || guard.fence !== undefined) return { added };
    const grows = rewrites(ops, guard);
    if (added <= 0 && !grows) return { added };
    const used = await this.used(tenant);
    if (added > 0 && used + added > this.maxBytes) throw storageExceeded(this.maxBytes);
    return grows ? { added, room: this.maxBytes - used - added } : { added };
  }

  /** Throws 429 as `check` when `n` more bytes would take `tenant` past its limit; counts nothing. */
  async room(tenant: string, n: number): Promise<void> {
    if (n > 0 && this.maxBytes > 0) {
      const used = await this.used(tenant);
      if (used + n > this.maxBytes) throw storageExceeded(this.maxBytes);
    }
  }

  /**
   * The 429 `quota_exceeded` (`storage_bytes`) of a write past the limit (also a script's refusal: apply's `storage`,
   * what a write rewrites would grow past `room`; a schedule's charge past the limit).
   */
  refusal(): QuotaExceeded {
    return storageExceeded(this.maxBytes);
  }

  /**
   * The most the tenant's counter `t:{tenant}:bytes` may hold after a write that adds bytes: the limit less its tool
   * tasks' bytes (another slot's counter, read here: a script of the counter's slot checks against it); null without
   * a limit.
   */
  async ceiling(tenant: string): Promise<number | null> {
    if (this.maxBytes <= 0) return null;
    return this.maxBytes - Number((await this.redis.get(taskKeys(tenant).bytes)) ?? 0);
  }

  /**
   * The bytes `tenant` stores: its sessions' and schedules' counter and its tool tasks' (two keys of two slots, read at
   * once: one round trip).
   */
  async used(tenant: string): Promise<number> {
    const [stored, tasks] = await Promise.all([
      this.redis.get(storageKey(tenant)),
      this.redis.get(taskKeys(tenant).bytes),
    ]);
    return Number(stored ?? 0) + Number(tasks ?? 0);
  }

  /**
   * Gives a deleted session's `bytes` back to its tenant's counter, once per delete (`deleted`: the id of its
   * `session.deleted` event, destroy-11.lua) whoever calls it and however often (storage-give-back-2.lua): the
   * deleting process, and any replica's sweep of the delete's mark should that process die first. The delete's own
   * record of them (keys.ts `giveBack`, another slot) is dropped by the caller after it. False when not given back
   * now (given back before, or too old to tell).
   */
  async giveBack(tenant: string, id: string, deleted: string, bytes: number): Promise<boolean> {
    const at = Number(/^(\d+)-\d+$/.exec(deleted)?.[1] ?? 0);
    const res = await this.redis.sessStorageGiveBack(
      storageKey(tenant),
      givenKey(tenant),
      `${id}/${deleted}`,
      bytes,
      at,
      GIVEN_KEEP_MS,
    );
    return res === 1;
  }

  /** Adds `n` bytes to the tenant's counter (with the other writes of this event-loop turn: CounterBatch). */
  async add(tenant: string, n: number): Promise<void> {
    if (n !== 0) await this.added.add(storageKey(tenant), [['bytes', n]]);
  }
}
