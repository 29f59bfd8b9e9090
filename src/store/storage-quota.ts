import { randomUUID } from 'node:crypto';
import type { Redis, Cluster } from 'ioredis';
import { quotaExceeded } from '../errors.js';
import type { ApplyOps, Guard } from './apply-ops.js';
import { CounterBatch } from './counter-batch.js';
import { sessionKeys } from './keys.js';
import './lua/commands.js';

/**
 * The per-tenant storage quota (TENANT_MAX_BYTES). Each write of a session counts the bytes it adds — the messages
 * and iteration records it pushes, the follow-ups it queues, the events it logs, a compaction's summary, and the
 * whole state at creation — into the session's `bytes` field, in the same script as the write (an `hincr` of the
 * apply), and then into the tenant's counter `t:{tenant}:bytes` (one INCRBY: a global key cannot join the session's
 * script in a Redis Cluster). A destroy takes the session's `bytes` back off. The count is an upper bound of what
 * the tenant keeps (events and history trimmed later are not subtracted), shared by every replica.
 *
 * A destroy's give-back cannot join its script either, so a process killed between the two would leave the bytes
 * counted for good. Each destroy therefore records first, in the tenant's slot, what it will owe (`owe`: a random
 * token → `{id, at}` in `t:{tenant}:owed`, and the tenant in the index OWED_TENANTS_KEY), then its script
 * (destroy-8.lua) reads the session's bytes and writes them with the token into the `session.deleted` entry of the
 * log it keeps 60 s, then the destroy pays (`pay`: HDEL the record and DECRBY in one script, so the token is paid
 * once whoever settles it) or drops its record when its script deleted nothing. A record left by a killed process
 * is settled by `settleOwed`, a sweep of every replica (OwedSweeper): past a grace it pays the record if the
 * session's log holds a `session.deleted` entry with its token, and drops it otherwise (the script never ran, found
 * the session gone, or the log expired: then the bytes stay counted, an upper bound as before).
 *
 * A client's write (create, follow-up, result, PATCH…: every apply without a run's fence) is refused with 429
 * `quota_exceeded` (`details.quota: "storage_bytes"`) once the tenant's count reaches the limit; a run's own
 * commits are not (a turn's size is bounded by MAX_TURN_BYTES), so a run in flight ends normally.
 */
export const storageKey = (tenant: string) => `t:{${tenant}}:bytes`;
/** HASH: the tenant's owed records of session deletes under way or killed (token → JSON `{id, at}`). */
export const owedKey = (tenant: string) => `t:{${tenant}}:owed`;
/** ZSET: tenants that may have owed records, scored by (at most) the time of their oldest. */
export const OWED_TENANTS_KEY = 'quota:owed';
/**
 * A record younger than this is its delete's, still under way: the sweep leaves it. A delete's script runs only
 * within OWED_DEADLINE_MS of its record (Redis's clock, checked in the script), so a record past the grace either
 * has its script's entry in the log or never will (clocks of the two slots' nodes may differ by the difference).
 */
export const OWED_GRACE_MS = 20_000;
export const OWED_DEADLINE_MS = 10_000;
/** How often each replica's sweep settles owed records (well under the 60 s the deleted log is kept). */
export const OWED_SWEEP_MS = 10_000;
/** One `session.deleted` entry is looked for among this many of the log's last entries (an id made again). */
const LOG_LOOKBACK = 200;

/** A delete's owed record, as `owe` wrote it. */
export interface Owed {
  token: string;
  /** The record's time, Redis's clock (ms). */
  at: number;
}

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
      const used = Number((await this.redis.get(storageKey(tenant))) ?? 0);
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
      const used = Number((await this.redis.get(storageKey(tenant))) ?? 0);
      if (used + n > this.maxBytes)
        throw quotaExceeded('storage_bytes', this.maxBytes, 'bytes stored (TENANT_MAX_BYTES)');
    }
    await this.add(tenant, n);
  }

  /** Adds `n` bytes to the tenant's counter (with the other writes of this event-loop turn: CounterBatch). */
  async add(tenant: string, n: number): Promise<void> {
    if (n !== 0) await this.added.add(storageKey(tenant), [['bytes', n]]);
  }

  /**
   * Records what the delete of session `id` will owe its tenant, before the delete's script: the record, then the
   * tenant in the index (in that order: a sweep that removes the tenant from the index reads the hash after, so a
   * record it missed has its index entry written after the removal; a process killed between the two never ran its
   * script, so its record owes nothing).
   */
  async owe(tenant: string, id: string): Promise<Owed> {
    const token = randomUUID();
    const at = Number(await this.redis.sessOwedAdd(owedKey(tenant), token, id));
    await this.redis.zadd(OWED_TENANTS_KEY, 'LT', at, tenant);
    return { token, at };
  }

  /** Gives the record's bytes back, once per token (owed-pay-2.lua): true when this call paid. */
  async pay(tenant: string, token: string, bytes: number): Promise<boolean> {
    return (await this.redis.sessOwedPay(owedKey(tenant), storageKey(tenant), token, bytes)) === 1;
  }

  /** Drops a record whose delete removed nothing (or never ran): nothing is given back. */
  async drop(tenant: string, token: string): Promise<void> {
    await this.redis.hdel(owedKey(tenant), token);
  }

  /**
   * One pass of the settle sweep: up to `tenants` tenants of the index whose oldest record is past `graceMs`, up to
   * `records` records each and `total` in all. A record past the grace is paid when the session's log holds the
   * `session.deleted` entry of its token (the bytes its script removed), dropped otherwise. Returns the records
   * settled. Every delete leaves its tenant in the index until a pass finds its hash empty (3 round trips for such
   * a tenant): 500 tenants a pass every 10 s keeps up with 50 tenants deleting a second per replica.
   */
  async settleOwed(
    opts: { graceMs?: number; tenants?: number; records?: number; total?: number } = {},
  ): Promise<number> {
    const graceMs = opts.graceMs ?? OWED_GRACE_MS;
    const total = opts.total ?? 1000;
    // Scores are Redis's time, compared here with this process's: a skew only makes a tenant looked at early (its
    // young records are left, by Redis's time) or late.
    const due = await this.redis.zrangebyscore(
      OWED_TENANTS_KEY,
      '-inf',
      Date.now() - graceMs,
      'LIMIT',
      0,
      opts.tenants ?? 500,
    );
    let settled = 0;
    for (const tenant of due) {
      if (settled >= total) break;
      settled += await this.settleTenant(tenant, graceMs, Math.min(opts.records ?? 100, total - settled));
    }
    return settled;
  }

  private async settleTenant(tenant: string, graceMs: number, records: number): Promise<number> {
    const [now, cursor, fields] = await this.redis.sessOwedScan(owedKey(tenant), records);
    let young = Infinity;
    let settled = 0;
    for (let i = 0; i < fields.length; i += 2) {
      const token = fields[i]!;
      let rec: { id?: unknown; at?: unknown };
      try {
        rec = JSON.parse(fields[i + 1]!) as typeof rec;
      } catch {
        rec = {};
      }
      const at = Number(rec.at);
      if (typeof rec.id === 'string' && Number.isFinite(at) && Number(now) - at < graceMs) {
        young = Math.min(young, at);
        continue;
      }
      const bytes =
        typeof rec.id === 'string' && Number.isFinite(at) ? await this.deletedBytes(rec.id, token, at) : null;
      if (bytes === null) await this.drop(tenant, token);
      else await this.pay(tenant, token, bytes);
      settled++;
    }
    // Not all seen: the tenant keeps its score, the next pass goes on.
    if (String(cursor) !== '0') return settled;
    if (young !== Infinity) {
      // Records left are their deletes' (or the next pass's): looked at again once the oldest is past the grace.
      await this.redis.zadd(OWED_TENANTS_KEY, young, tenant);
      return settled;
    }
    // None left: out of the index, then the hash read again (a record written meanwhile is indexed after the ZREM,
    // or seen here and indexed again).
    await this.redis.zrem(OWED_TENANTS_KEY, tenant);
    if ((await this.redis.hlen(owedKey(tenant))) > 0)
      await this.redis.zadd(OWED_TENANTS_KEY, 'LT', now, tenant);
    return settled;
  }

  /**
   * The bytes the delete of token `token` removed, from the `session.deleted` entry its script wrote to the
   * session's log (kept 60 s), or null when there is none: looked for among the last LOG_LOOKBACK entries since a
   * minute before the record (an id made again appends its own events after it).
   */
  private async deletedBytes(id: string, token: string, at: number): Promise<number | null> {
    const entries = await this.redis.xrevrange(
      sessionKeys(id).events,
      '+',
      String(Math.max(0, at - 60_000)),
      'COUNT',
      LOG_LOOKBACK,
    );
    for (const [, f] of entries) {
      const field = (name: string) => {
        for (let i = 0; i < f.length; i += 2) if (f[i] === name) return f[i + 1];
        return undefined;
      };
      if (field('t') === 'session.deleted' && field('tok') === token) return Number(field('b') ?? 0) || 0;
    }
    return null;
  }
}
