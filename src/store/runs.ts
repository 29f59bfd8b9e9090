/**
 * The run queue: who runs a session (the lease and its fencing token), which running sessions any replica may claim
 * (`runs:due`), and each tenant's slots among the active runs (TENANT_MAX_ACTIVE_RUNS). Keys from keys.ts; each
 * method is one command or one script unless its JSDoc says otherwise.
 */
import { isOutOfMemory } from './unavailable.js';
import { quotaExceeded } from '../errors.js';
import { AGENTS_DUE_KEY, RUNS_KEY, sessionKeys, tenantRunsKey } from './keys.js';
import type { RedisClient } from './lua-commands.js';
import { decodeStored } from './decode.js';
import { decodeFields, type IterationRecord, type SessionState } from './session-state.js';

/** What a claim finds: the run's fencing token and the session as it was when the lease was taken. */
export interface Claimed {
  fence: number;
  state: SessionState;
  /** Follow-ups queued for the next user turn. */
  queued: number;
  /** The session's last iteration record (null: none). */
  lastRecord: IterationRecord | null;
}

/**
 * A run slot younger than this is never dropped as stale: the write that makes its session `running` may still be
 * on its way (the slot is taken first).
 */
const RUN_SLOT_GRACE_MS = 10_000;

export class RunQueue {
  constructor(
    private readonly redis: RedisClient,
    /** Most sessions of one tenant running at once (TENANT_MAX_ACTIVE_RUNS); 0: no limit. */
    private readonly tenantMaxActiveRuns: number,
  ) {}

  /**
   * Takes the run lease of a `running` session and reads the session in the same round trip (acquire-4.lua); null
   * if another holds the lease or the session is not running.
   */
  async acquire(id: string, owner: string, ttlMs: number): Promise<Claimed | null> {
    const k = sessionKeys(id);
    const res = await this.redis.sessAcquire(k.meta, k.lease, k.queue, k.iters, owner, ttlMs);
    if (res === 0) return null;
    const [fence, flat, queued, last] = res;
    const h: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) h[flat[i]!] = flat[i + 1]!;
    return {
      fence: Number(fence),
      state: decodeFields(h),
      queued: Number(queued),
      lastRecord: last ? decodeStored<IterationRecord>(last) : null,
    };
  }

  renew(id: string, owner: string, fence: number, ttlMs: number): Promise<boolean> {
    return this.redis.sessRenew(sessionKeys(id).lease, `${owner}:${fence}`, ttlMs).then((r) => r === 1);
  }

  release(id: string, owner: string, fence: number): Promise<boolean> {
    return this.redis.sessRelease(sessionKeys(id).lease, `${owner}:${fence}`).then((r) => r === 1);
  }

  async leaseHolder(id: string): Promise<string | null> {
    return this.redis.get(sessionKeys(id).lease);
  }

  /** Marks a running session as claimable by any replica after `atMs` (crash recovery). */
  async markDue(id: string, atMs: number): Promise<void> {
    await this.redis.zadd(RUNS_KEY, atMs, id);
  }

  /** Makes the session a member of the sub-agent trees' due set, looked at by the agents' sweep after `atMs`. */
  async watchTree(id: string, atMs: number): Promise<void> {
    await this.redis.zadd(AGENTS_DUE_KEY, atMs, id);
  }

  /**
   * The run is over (the session left `running`, or is gone): drops its due entry and gives back its tenant's
   * run slot. `tenant` is read from the session when not given (one HGET).
   */
  /**
   * The run of `id` ended (or the session is gone: `deleted`). A delete must work when Redis is full, which refuses
   * the ZADD: then the agents' sweep comes to a deleted tree member at its earlier due time instead of now.
   */
  async unmarkDue(id: string, tenant?: string, deleted = false): Promise<void> {
    const t = tenant ?? (await this.redis.hget(sessionKeys(id).meta, 'tenant'));
    // A session of a sub-agent tree: its run ended, the agents' sweep looks at it now (others are not members).
    const agentsDue = this.redis.zadd(AGENTS_DUE_KEY, 'XX', Date.now(), id);
    await Promise.all([
      this.redis.zrem(RUNS_KEY, id),
      t !== null ? this.redis.zrem(tenantRunsKey(t), id) : null,
      deleted
        ? agentsDue.catch((err: unknown) => {
            if (!isOutOfMemory(err)) throw err;
          })
        : agentsDue,
    ]);
  }

  /**
   * Takes a slot among the tenant's active runs for session `id`, or throws 429 `quota_exceeded`
   * (`details.quota: "TENANT_MAX_ACTIVE_RUNS"`). The count lives in Redis (tenantRunsKey), so it holds across
   * replicas; it cannot join the session's script (another hash tag), so a slot may outlive its run (a crash
   * between a run's last commit and `unmarkDue`, a start refused after its slot was taken). At the limit, such
   * slots are found by reading their sessions — a slot whose session is not `running` is stale — and dropped, so
   * the count is the number of running sessions, whatever crashed. Without a tenant (a session not written yet), or
   * with no limit, nothing is counted.
   */
  async takeRunSlot(tenant: string | null, id: string): Promise<void> {
    const max = this.tenantMaxActiveRuns;
    if (max <= 0 || tenant === null) return;
    const key = tenantRunsKey(tenant);
    for (let attempt = 0; ; attempt++) {
      const now = Date.now();
      if ((await this.redis.sessRunSlotTake(key, id, now, max)) === 1) return;
      if (attempt > 0) throw quotaExceeded('TENANT_MAX_ACTIVE_RUNS', max, 'active runs');
      const rows = await this.redis.zrangebyscore(key, '-inf', now - RUN_SLOT_GRACE_MS, 'WITHSCORES');
      const seen: Array<[string, string]> = [];
      for (let i = 0; i < rows.length; i += 2) seen.push([rows[i]!, rows[i + 1]!]);
      const states = await Promise.all(
        seen.map(([sid]) => this.redis.hmget(sessionKeys(sid).meta, 'status', 'tenant')),
      );
      const stale = seen.filter((_, i) => states[i]![0] !== 'running' || states[i]![1] !== tenant);
      if (stale.length === 0) throw quotaExceeded('TENANT_MAX_ACTIVE_RUNS', max, 'active runs');
      await this.redis.sessRunSlotPrune(key, ...stale.flat());
    }
  }

  /** Counts a session that is running among its tenant's active runs, without a check (see `takeRunSlot`). */
  async holdRunSlot(tenant: string, id: string): Promise<void> {
    if (this.tenantMaxActiveRuns > 0) await this.redis.zadd(tenantRunsKey(tenant), Date.now(), id);
  }

  /** The sessions holding a slot among the tenant's active runs (tests, metrics). */
  runSlots(tenant: string): Promise<string[]> {
    return this.redis.zrange(tenantRunsKey(tenant), 0, -1);
  }

  /** Running sessions whose claim time has passed. */
  dueRuns(nowMs: number, limit: number): Promise<string[]> {
    return this.redis.zrangebyscore(RUNS_KEY, 0, nowMs, 'LIMIT', 0, limit);
  }
}
