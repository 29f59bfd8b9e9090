import { randomBytes } from 'node:crypto';
import type { Redis, Cluster } from 'ioredis';
import { quotaExceeded } from '../errors.js';
import type { ApplyOps, Guard } from './apply-ops.js';
import { CounterBatch } from './counter-batch.js';
import { sessionKeys } from './keys.js';

/**
 * The per-tenant storage quota (TENANT_MAX_BYTES). Each write of a session counts the bytes it adds — the messages
 * and iteration records it pushes, the follow-ups it queues, the events it logs, a compaction's summary, and the
 * whole state at creation — into the session's `bytes` field, in the same script as the write (an `hincr` of the
 * apply), and then into the tenant's counter `t:{tenant}:bytes` (one INCRBY: a global key cannot join the session's
 * script in a Redis Cluster). A destroy takes the session's `bytes` back off. The count is an upper bound of what
 * the tenant keeps (events and history trimmed later are not subtracted), shared by every replica.
 *
 * A client's write (create, follow-up, result, PATCH…: every apply without a run's fence) is refused with 429
 * `quota_exceeded` (`details.quota: "storage_bytes"`) once the tenant's count reaches the limit; a run's own
 * commits are not (a turn's size is bounded by MAX_TURN_BYTES), so a run in flight ends normally.
 *
 * A destroy gives the bytes back across slots too, so each delete first records them in the tenant's slot under a
 * record of its own (`owe`: `<session id> <token>` → `<bytes> <at>`), then runs its script, which keeps the token in
 * the session's `gone` key (GONE_TTL_MS) when it removed the session, then settles its record (bytes-owed-2.lua: the
 * DECRBY and the HDEL in one step): paid if its script removed the session, dropped if not. So two deletes of one
 * session give back once, and a delete killed between its script and its settle leaves a record that the tenant's
 * quota checks settle later (`reconcile`), paid only if `gone` names it.
 */
export const storageKey = (tenant: string) => `t:{${tenant}}:bytes`;
/** HASH `<session id> <token>` → `<bytes> <at ms>`: the bytes a delete of that session is to give back (see above). */
export const storageOwedKey = (tenant: string) => `t:{${tenant}}:bytes:owed`;

/** A record younger than this is its delete's own to settle (under way); an older one, the reconciliation's. */
const OWED_SETTLE_MS = 30_000;
/** One process looks at a tenant's records at most this often (on its quota checks). */
const RECONCILE_EVERY_MS = 30_000;
/** Records one reconciliation reads (one HSCAN page; the next one goes on from its cursor). */
const RECONCILE_PAGE = 64;
/**
 * How long a deleted session's `gone` key names the delete that removed it (ms). A record of that delete not settled
 * by then is dropped: the count stays high (an upper bound), as it does on a full Redis.
 */
export const GONE_TTL_MS = 3_600_000;

/** Bytes `ops` adds to a session (0 for a write that only changes state). */
export function addedBytes(ops: ApplyOps, guard: Guard): number {
  let n = 0;
  for (const m of ops.push_msgs ?? []) n += m.length;
  for (const m of ops.push_iters ?? []) n += m.length;
  for (const q of ops.queue_push ?? []) n += q.length;
  for (const e of ops.events ?? []) n += e[1].length;
  if (ops.compact) n += ops.compact.summary.length;
  if (guard.create) for (const v of Object.values(ops.hset ?? {})) n += v.length;
  return n;
}

export class StorageQuota {
  /** Bytes on their way to their tenant's counter: the writes of one event-loop turn in one INCRBY per tenant. */
  private readonly added: CounterBatch;
  /** Per tenant: when this process last read a page of its records, and the HSCAN cursor to go on from. */
  private readonly reconciled = new Map<string, { at: number; cursor: string }>();

  constructor(
    private readonly redis: Redis | Cluster,
    /** TENANT_MAX_BYTES; 0: no limit (the bytes are counted all the same). */
    private readonly maxBytes: number,
  ) {
    this.added = new CounterBatch((key, sums) => this.redis.incrby(key, sums.get('bytes') ?? 0));
  }

  /**
   * Throws 429 when a client's write of `tenant` would add bytes while the tenant is at its limit (`refuse` false: a
   * write the service makes on its own, counted and never refused, as a run's commits are).
   */
  async check(tenant: string, ops: ApplyOps, guard: Guard, refuse = true): Promise<number> {
    const n = addedBytes(ops, guard);
    if (refuse && n > 0 && this.maxBytes > 0 && guard.fence === undefined) {
      const used = await this.used(tenant);
      if (used + n > this.maxBytes)
        throw quotaExceeded('storage_bytes', this.maxBytes, 'bytes stored (TENANT_MAX_BYTES)');
    }
    return n;
  }

  /**
   * Bytes the tenant keeps outside its sessions (a schedule's create body): 429 as `check` when they would take it
   * past its limit, else counted. A negative `n` gives bytes back.
   */
  async charge(tenant: string, n: number): Promise<void> {
    if (n > 0 && this.maxBytes > 0) {
      const used = await this.used(tenant);
      if (used + n > this.maxBytes)
        throw quotaExceeded('storage_bytes', this.maxBytes, 'bytes stored (TENANT_MAX_BYTES)');
    }
    await this.add(tenant, n);
  }

  /** The tenant's count, less what its deletes' records left unsettled are found to owe (`reconcile`). */
  private async used(tenant: string): Promise<number> {
    const [count, paid] = await Promise.all([this.redis.get(storageKey(tenant)), this.reconcile(tenant)]);
    return Number(count ?? 0) - paid;
  }

  /**
   * Settles the records deletes left (killed between their script and their settle, or before their script): one
   * page of the tenant's records at most every RECONCILE_EVERY_MS per process, on its quota checks (so a check
   * costs no more round trips than before but then). A record younger than OWED_SETTLE_MS is its delete's, under
   * way; an older one is paid when its session is gone and the session's `gone` key names the record's token (its
   * delete removed the session), else dropped (its delete removed nothing, or never ran). The bytes paid.
   */
  private async reconcile(tenant: string): Promise<number> {
    const now = Date.now();
    const last = this.reconciled.get(tenant);
    if (last && now - last.at < RECONCILE_EVERY_MS) return 0;
    this.reconciled.set(tenant, { at: now, cursor: last?.cursor ?? '0' });
    const [cursor, flat] = await this.redis.hscan(
      storageOwedKey(tenant),
      last?.cursor ?? '0',
      'COUNT',
      RECONCILE_PAGE,
    );
    this.reconciled.set(tenant, { at: now, cursor });
    let paid = 0;
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const field = flat[i]!;
      const at = Number(flat[i + 1]!.split(' ')[1] ?? 0);
      if (now - at < OWED_SETTLE_MS) continue;
      const [id = '', token = ''] = field.split(' ');
      const k = sessionKeys(id);
      const [exists, gone] = await Promise.all([this.redis.exists(k.meta), this.redis.get(k.gone)]);
      paid += await this.settle(tenant, field, exists === 0 && gone === token ? 'pay' : 'drop');
    }
    return paid;
  }

  /**
   * Records what a delete of session `id` will give back, before its script, under a record of its own: its field
   * (to settle it by) and its token (for the delete's script to keep in the session's `gone` key).
   */
  async owe(tenant: string, id: string, bytes: number): Promise<{ field: string; token: string }> {
    const token = randomBytes(9).toString('base64url');
    const field = `${id} ${token}`;
    await this.redis.hset(storageOwedKey(tenant), field, `${bytes} ${Date.now()}`);
    return { field, token };
  }

  /**
   * Settles one delete's record (bytes-owed-2.lua): `pay` (its script removed the session) gives its bytes back and
   * drops it, `drop` only drops it; once, whoever settles it. The bytes given back.
   */
  settle(tenant: string, field: string, how: 'pay' | 'drop'): Promise<number> {
    return this.redis.sessBytesOwed(storageKey(tenant), storageOwedKey(tenant), field, how);
  }

  /** Adds `n` bytes to the tenant's counter (with the other writes of this event-loop turn: CounterBatch). */
  async add(tenant: string, n: number): Promise<void> {
    if (n !== 0) await this.added.add(storageKey(tenant), [['bytes', n]]);
  }
}
