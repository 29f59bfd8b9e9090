import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { QuotaExceeded } from '../errors.js';
import { defineLuaCommands } from '../store/lua-commands.js';
import './lua/commands.js';

export interface TenantSlotsOptions {
  /**
   * A slot's own expiry, renewed by its replica every third of it while held: what frees the slots of a replica that
   * never said it was alive (an older version's, or one whose liveness entry was lost).
   */
  ttlMs?: number;
  /** How long a replica counts as alive after it last said so (it says so every fifth of it). */
  aliveMs?: number;
}

/** Most lapsed replicas one acquire drops the slots of (replicas that died in the last two minutes). */
const MAX_LAPSED = 100;

/**
 * Slots a tenant holds across replicas (open event streams): one ZSET per tenant in Redis (hash tag: the tenant),
 * members `<replica>:<n>`. Acquire is one atomic script (lua/acquire-slot-1.lua: check and take); release is one
 * ZREM.
 *
 * A replica that dies (SIGKILL) releases nothing: its slots are reclaimed by its liveness. Every replica writes its
 * id into one ZSET of replicas (`q:replicas:<name>`, its deadline by Redis's clock) every fifth of `aliveMs`: one
 * command per replica per period, whatever the count of tenants and streams it holds. An acquire that finds the
 * tenant at the quota asks for the replicas whose deadline passed and takes the slot again, dropping those
 * replicas' slots in the same script: a follower that reconnects to another replica after a crash waits at most
 * `aliveMs` (the 429's Retry-After) instead of the slots' `ttlMs`. A replica that stalls past `aliveMs` (a frozen
 * process) may lose its slots that way: the quota is then loose by them until they close, never tighter.
 *
 * Each slot keeps its own expiry as well (renewed every third of `ttlMs`), so replicas of an older version, which
 * neither write liveness nor drop lapsed replicas' slots, share the count, and a slot whose replica has no liveness
 * entry still lapses.
 *
 * Every time here is Redis's (`TIME` in the scripts; the replica passes `ttlMs` and `aliveMs`), so the replicas'
 * clocks may disagree: with its own Date.now(), a replica 10 minutes ahead took the others' live slots for expired
 * and let a tenant past its quota, one behind counted a dead replica's slots 10 minutes past their expiry.
 */
export class TenantSlots {
  private readonly replica = randomUUID();
  private seq = 0;
  /** key → members this replica holds. */
  private readonly held = new Map<string, Set<string>>();
  private readonly timers: NodeJS.Timeout[];
  private readonly ttlMs: number;
  private readonly aliveMs: number;
  /** The replicas' liveness (no hash tag: one key, touched by single-key commands only). */
  private readonly aliveKey: string;

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly name: string,
    opts: TenantSlotsOptions = {},
  ) {
    this.ttlMs = opts.ttlMs ?? 60_000;
    this.aliveMs = opts.aliveMs ?? 5_000;
    this.aliveKey = `q:replicas:${name}`;
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'quota');
    void this.alive();
    this.timers = [
      setInterval(() => void this.alive(), Math.ceil(this.aliveMs / 5)),
      setInterval(() => void this.renew(), Math.ceil(this.ttlMs / 3)),
    ];
    for (const t of this.timers) t.unref();
  }

  /**
   * The tenant's ZSET, or with `within` the ZSET of one holder among the tenant's (a client token's, counted apart
   * from and besides the tenant's). Hash tag: the tenant, so a Redis Cluster keeps them in one slot.
   */
  private key(tenant: string, within?: string) {
    return within === undefined ? `q:{${tenant}}:${this.name}` : `q:{${tenant}}:${this.name}:${within}`;
  }

  /**
   * The 429 `q` of an acquire that found no slot (the tenant's or a holder's within it), with Retry-After: the slots
   * of a replica that died are reclaimed by then.
   */
  refusal(q: QuotaExceeded): QuotaExceeded {
    return new QuotaExceeded(q.code, q.message, q.details, {
      retryAfterS: Math.ceil(this.aliveMs / 1000),
    });
  }

  /**
   * Takes a slot if fewer than `max` are held by the tenant (or by `within` of it) on all replicas; returns its
   * release, or null.
   */
  async acquire(tenant: string, max: number, within?: string): Promise<(() => void) | null> {
    const key = this.key(tenant, within);
    const member = `${this.replica}:${++this.seq}`;
    let ok = await this.redis.quotaAcquireSlot(key, this.ttlMs, max, member);
    if (ok !== 1) {
      // At the quota: slots of replicas that died may be what fills it. Dropped in the acquire's own script, so the
      // drop and the count are one step (a lapsed replica does not come back: a frozen one that does has lost them).
      const lapsed = await this.redis.quotaLapsedReplicas(this.aliveKey, MAX_LAPSED);
      if (lapsed.length > 0) ok = await this.redis.quotaAcquireSlot(key, this.ttlMs, max, member, ...lapsed);
    }
    if (ok !== 1) return null;
    let set = this.held.get(key);
    if (!set) this.held.set(key, (set = new Set()));
    set.add(member);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      set.delete(member);
      if (set.size === 0 && this.held.get(key) === set) this.held.delete(key);
      this.redis.zrem(key, member).catch(() => {
        /* Redis away: the slot lapses with this replica's liveness, or after ttlMs */
      });
    };
  }

  /**
   * Says this replica is alive, held slots or not: a replica whose entry lapsed while it held nothing would have
   * the slots it takes next dropped by others until it says so again.
   */
  private async alive(): Promise<void> {
    await this.redis
      .quotaReplicaAlive(this.aliveKey, this.replica, this.aliveMs, 2 * this.ttlMs)
      .catch(() => {
        /* Redis away: said again next period */
      });
  }

  /**
   * Pushes the expiry of every held slot `ttlMs` past Redis's now (renew-slots-1.lua: one script per tenant, a
   * Cluster's keys being the tenant's). Not private only so that a test can run one renewal
   * (test/quotas/quotas-clock.test.ts); its timer calls it every third of `ttlMs`.
   */
  async renew(): Promise<void> {
    for (const [key, members] of this.held) {
      if (members.size === 0) continue;
      await this.redis.quotaRenewSlots(key, this.ttlMs, ...members).catch(() => {});
    }
  }

  /**
   * Stops renewing and releases this replica's slots. Its liveness entry is left to lapse: a slot whose release
   * failed here is then reclaimed within `aliveMs`.
   */
  async close(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    for (const [key, members] of this.held) {
      if (members.size) await this.redis.zrem(key, ...members).catch(() => {});
    }
    this.held.clear();
  }
}
