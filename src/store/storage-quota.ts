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
 * A destroy gives the bytes back across slots too, so it records them first in the tenant's slot (`owe`: session id →
 * `<token> <bytes> <at>`, HSETNX), then deletes the session, then settles the record (bytes-owed-2.lua: the DECRBY
 * and the HDEL in one step, so a retried or second delete never gives back twice). A delete killed after its script
 * leaves the record; the tenant's next quota check (`used`) pays each record whose session is gone, and drops one
 * whose session is still there after OWED_STALE_MS (a delete killed before its script, or refused).
 */
export const storageKey = (tenant: string) => `t:{${tenant}}:bytes`;
/** HASH session id → `<token> <bytes> <at ms>`: the bytes a delete of that session is to give back (see above). */
export const storageOwedKey = (tenant: string) => `t:{${tenant}}:bytes:owed`;

/**
 * A record whose session still exists this long after it was written is dropped: its delete never ran (killed
 * before its script) or was refused. A delete that takes longer between its record and its script gives nothing back
 * (the count stays an upper bound).
 */
const OWED_STALE_MS = 60_000;

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

  /**
   * The tenant's count, after paying what deletes killed after their script left owed (one round trip: the GET and
   * the HGETALL auto-pipelined, same slot; more only when a record is there).
   */
  private async used(tenant: string): Promise<number> {
    const [count, owed] = await Promise.all([
      this.redis.get(storageKey(tenant)),
      this.redis.hgetall(storageOwedKey(tenant)),
    ]);
    let used = Number(count ?? 0);
    for (const [id, rec] of Object.entries(owed)) {
      const [token = '', , at = '0'] = rec.split(' ');
      // A record whose session is gone: its delete ran and was killed before settling (or settles right now: the
      // script pays once, whoever comes first).
      if ((await this.redis.exists(sessionKeys(id).meta)) === 0)
        used -= await this.settle(tenant, id, 'pay', token);
      else if (Date.now() - Number(at) > OWED_STALE_MS) await this.settle(tenant, id, 'drop', token);
    }
    return used;
  }

  /**
   * Records what a delete of session `id` will give back, before its script: the token of the record written, or
   * null when a record was there already (another delete's, which the settle after a successful delete pays all the
   * same).
   */
  async owe(tenant: string, id: string, bytes: number): Promise<string | null> {
    const token = randomBytes(9).toString('base64url');
    const set = await this.redis.hsetnx(storageOwedKey(tenant), id, `${token} ${bytes} ${Date.now()}`);
    return set === 1 ? token : null;
  }

  /**
   * Settles the record of a delete of `id` (bytes-owed-2.lua): `pay` (the session is gone) gives its bytes back
   * and drops it, `drop` only drops it; only the record of `token` ('': whichever is there). The bytes given back.
   */
  settle(tenant: string, id: string, how: 'pay' | 'drop', token: string): Promise<number> {
    return this.redis.sessBytesOwed(storageKey(tenant), storageOwedKey(tenant), id, how, token);
  }

  /** Adds `n` bytes to the tenant's counter (with the other writes of this event-loop turn: CounterBatch). */
  async add(tenant: string, n: number): Promise<void> {
    if (n !== 0) await this.added.add(storageKey(tenant), [['bytes', n]]);
  }
}
