/**
 * The run queue: who runs a session (the lease and its fencing token), which running sessions any replica may claim
 * (`runs:due`), and each tenant's slots among the active runs (TENANT_MAX_ACTIVE_RUNS). The only door to those keys:
 * the rest of the service says what happens to a run (`start`, `claim`, `heartbeat`, `end`, …), and the eslint rule
 * in eslint.config.js keeps the keys and the low-level calls here. Keys from keys.ts; each operation's JSDoc says
 * what it sends.
 */
import { isOutOfMemory } from './unavailable.js';
import { quotaExceeded } from '../errors.js';
import { RUNS_KEY, sessionKeys, tenantRunsKey } from './keys.js';
import { TreeDue } from './tree-due.js';
import type { RedisClient } from './lua-commands.js';
import type { RedisClock } from '../redis/clock.js';
import { decodeStored } from './decode.js';
import { decodeFields, type IterationRecord, type SessionState } from './session-state.js';

/** What a claim finds: the run's fencing token and the session as it was when the lease was taken. */

export interface Claimed {
  fence: number;
  /**
   * The session, but its pending step (`pending` null, whatever is stored): the claim does not read the step
   * (acquire-run-4.lua), which may hold megabytes of inputs and results.
   */
  state: SessionState;
  /** The session holds a pending step, not read: the run reads the session again before it uses `state.pending`. */
  stepUnread: boolean;
  /** Follow-ups queued for the next user turn. */
  queued: number;
  /** The session's last iteration record (null: none). */
  lastRecord: IterationRecord | null;
}

/**
 * A run slot younger than this (by Redis's clock, which dates and ages the slots: run-slot-take-1.lua) is never
 * dropped as stale: the write that makes its session `running` may still be on its way (the slot is taken first).
 */
const RUN_SLOT_GRACE_MS = 10_000;

/** A session made runnable (`start`, `wake`) is claimable by any replica after this long if no process took it. */
const START_DUE_DELAY_MS = 2000;

/**
 * A session whose settling failed in the runs' sweep (its tenant's ledger refused the record) is due again this long
 * from then: behind the other due runs, which the pass goes on to, rather than at the head of every pass.
 */
const SETTLE_RETRY_MS = 30_000;

/** The run of one session as this replica holds it: what a heartbeat renews. */
export interface HeldRun {
  id: string;
  /** The fencing token of the claim. */
  fence: number;
  /** The session's tenant, once known (null: the heartbeat holds no run slot). */
  tenant: string | null;
  /**
   * Set by `end`, before its first command: a heartbeat that fires after it sends nothing, so its ZADDs cannot land
   * after end's ZREMs and leave the ended run holding a slot. (One that fired before is sent before them on the same
   * connection, so Redis runs it first; if its answer comes after `end` read `due`, the entry holds another time
   * than `due` and is left, for the sweep to drop: see `due`.)
   */
  ended?: boolean;
  /**
   * The due time this run's own `keep` set last while it held the lease (ms, Redis's clock); LOST_DUE after a
   * heartbeat that found the lease gone. `end` drops the run's due entry only while it holds this time
   * (run-due-drop-1.lua): another time is someone else's (the next run's), or one this run wrote without its lease —
   * after its last commit released it, a heartbeat's ZADD may have overwritten the next run's entry — and stays; the
   * runs' sweep drops an entry whose session is not `running`.
   */
  due?: number | undefined;
}

/** `HeldRun.due` after a heartbeat without the lease: no due time equals it, so `end` leaves the entry. */
const LOST_DUE = -1;

export class RunQueue {
  /** When the agents' sweep looks at each sub-agent tree member: a run's end wakes its member. */
  readonly trees: TreeDue;

  constructor(
    private readonly redis: RedisClient,
    /** Most sessions of one tenant running at once (TENANT_MAX_ACTIVE_RUNS); 0: no limit. */
    private readonly tenantMaxActiveRuns: number,
    /** The store's reckoning of Redis's clock (the trees' due reads feed it). */
    clock: RedisClock,
  ) {
    this.trees = new TreeDue(redis, clock);
  }

  /**
   * A session is about to be written `running` (a create): takes its tenant's run slot first, or throws 429
   * `quota_exceeded`. The slot is taken before the write: a slot without a running session is dropped later
   * (see `takeRunSlot`), whereas the other order could run more than the limit.
   */
  admit(tenant: string | null, id: string): Promise<void> {
    return this.takeRunSlot(tenant, id);
  }

  /**
   * A session becomes runnable (a write that sets `running`, before that write): takes its tenant's run slot (429
   * `quota_exceeded` at the limit), then registers the run as due after START_DUE_DELAY_MS, so any replica claims it
   * should the one that kicked it not. Before the write: a due entry without a running session is dropped by the
   * sweep, whereas a running session without a due entry would never run.
   */
  async start(tenant: string | null, id: string): Promise<void> {
    await this.takeRunSlot(tenant, id);
    await this.markDue(id, START_DUE_DELAY_MS);
  }

  /**
   * A running session without a run in any process has what it waited for (a tool task's result, a session
   * written running just before): due after START_DUE_DELAY_MS (one ZADD), for any replica should the kick here
   * not claim it. Its run slot is held again by the run's heartbeat.
   */
  async wake(id: string): Promise<void> {
    await this.markDue(id, START_DUE_DELAY_MS);
  }

  /**
   * A replica takes the run lease of a `running` session and reads the session but its pending step in the same
   * round trip (acquire-run-4.lua); null if another holds the lease or the session is not running.
   */
  async claim(id: string, owner: string, ttlMs: number): Promise<Claimed | null> {
    const k = sessionKeys(id);
    const res = await this.redis.sessAcquireRun(k.meta, k.lease, k.queue, k.iters, owner, ttlMs);
    if (res === 0) return null;
    const [fence, flat, queued, last, step] = res;
    const h: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) h[flat[i]!] = flat[i + 1]!;
    return {
      fence: Number(fence),
      state: decodeFields(h),
      stepUnread: Number(step) === 1,
      queued: Number(queued),
      lastRecord: last ? decodeStored<IterationRecord>(last) : null,
    };
  }

  /**
   * The run goes on in the replica holding its lease (it began, or a parked run found its result after all): due
   * only once the lease could have lapsed (`ttlMs` from now, one ZADD), so the sweep takes it over only then.
   * `slotOf`: the tenant whose run slot the run holds again, without a check (a claim by the sweep: a takeover, a
   * hand-over, whose slot may have been given back).
   */
  async keep(run: HeldRun, ttlMs: number, slotOf: string | null = null): Promise<void> {
    run.due = await this.dueAgain(run.id, ttlMs, slotOf);
  }

  /** `keep`'s writes; the due time set. */
  private async dueAgain(id: string, ttlMs: number, slotOf: string | null): Promise<number> {
    const [due] = await Promise.all([
      this.markDue(id, ttlMs),
      slotOf !== null ? this.holdRunSlot(slotOf, id) : null,
    ]);
    return due;
  }

  /**
   * Renews the run's lease for `ttlMs`, its due time with it and its tenant's slot (`keep`), in parallel; false when
   * the lease is no longer this run's (another replica took it over, or its last commit released it). The due time
   * is the run's own only when the lease was (`HeldRun.due`).
   */
  async heartbeat(run: HeldRun, owner: string, ttlMs: number): Promise<boolean> {
    if (run.ended) return true;
    const [ok, due] = await Promise.all([
      this.renew(run.id, owner, run.fence, ttlMs),
      this.dueAgain(run.id, ttlMs, run.tenant),
    ]);
    run.due = ok ? due : LOST_DUE;
    return ok;
  }

  /**
   * Lets go of the lease (release-2.lua; a no-op if it is not this claim's). `handOver` (this process stops): the run
   * is due now, for any replica, rather than after the lease TTL (even when the release failed). `spentSeq`: the seq
   * through which the run recorded the session's spend in its tenant's day (RunHandle `spendRecorded`): the entries
   * of `spend_open` at or below it go with the release (the field once none is left), whether or not the lease is
   * still held; a later entry (a turn whose record failed, or a later run's) stays.
   */
  async release(
    id: string,
    owner: string,
    fence: number,
    handOver = false,
    spentSeq: number | null = null,
  ): Promise<void> {
    const k = sessionKeys(id);
    try {
      await this.redis.sessRelease(
        k.lease,
        k.meta,
        `${owner}:${fence}`,
        spentSeq === null ? '' : String(spentSeq),
      );
    } finally {
      if (handOver) await this.markDue(id, 0);
    }
  }

  /** The lease's holder (`owner:fence`), or null when no process runs the session. */
  async leaseHolder(id: string): Promise<string | null> {
    return this.redis.get(sessionKeys(id).lease);
  }

  /**
   * The run is over (the session left `running`, is gone, or waits without a run for a worker): drops its due
   * entry and gives back its tenant's run slot; a session of a sub-agent tree wakes the agents' sweep. `tenant` is
   * read from the session when not given (one HGET); of a session gone, from its tree's data (one HGET more: a
   * delete that died before its own `end`, whose due entry the runs' sweep finds, still wakes the member).
   * A delete (`deleted`) must work when Redis is full, which refuses the ZADD: then the agents' sweep comes to a
   * deleted tree member at its earlier due time instead of now. A run ending itself passes its `HeldRun` (see
   * `ended`), and its due entry is dropped only while it holds the run's own due time (`due`): the run's last commit
   * released its lease, so a message may have started the next run, whose entry stays.
   */
  async end(of: string | HeldRun, tenant?: string, deleted = false): Promise<void> {
    if (typeof of !== 'string') of.ended = true;
    await this.drop(of, tenant, deleted);
  }

  /**
   * A run gives its session up to wait for tool tasks, still holding its lease (its heartbeat renews it: the run goes
   * on, should a result have come meanwhile): `end`'s writes without marking the run ended. Its due entry is dropped
   * only while it holds the run's own due time: a write that made the session due again while the run held the
   * lease (a worker's result, a decision: `start`, `wake`) stays — dropped, a crash before the run saw that write and
   * kept its due time would leave the session `running` with nothing to claim it.
   */
  async park(run: HeldRun, tenant: string): Promise<void> {
    await this.drop(run, tenant, false);
  }

  /** `end`'s and `park`'s writes. */
  private async drop(of: string | HeldRun, tenant: string | undefined, deleted: boolean): Promise<void> {
    const id = typeof of === 'string' ? of : of.id;
    const own = tenant ?? (await this.redis.hget(sessionKeys(id).meta, 'tenant'));
    const t = own ?? (await this.trees.tenantOf(id));
    // A session of a sub-agent tree: its run ended, the agents' sweep looks at it now (others are not members; a
    // member of the old single set, gone, is woken there: its tenant is told by nothing).
    const agentsDue = t !== null ? this.trees.wake(id, t) : this.trees.wakeOld(id);
    // A session gone (no meta to tell its tenant) was deleted: as for the delete itself, a full Redis refusing the
    // wake-up's ZADD must not fail the runs' sweep that ends it.
    const gone = deleted || own === null;
    await Promise.all([
      // A run's own end: only its own due time (a message may have started the next run since its last commit).
      typeof of !== 'string' && of.due !== undefined
        ? this.redis.sessRunDueDrop(RUNS_KEY, id, of.due)
        : this.redis.zrem(RUNS_KEY, id),
      t !== null ? this.redis.zrem(tenantRunsKey(t), id) : null,
      gone
        ? agentsDue.catch((err: unknown) => {
            if (!isOutOfMemory(err)) throw err;
          })
        : agentsDue,
    ]);
  }

  /**
   * The sweep: up to `limit` due runs (their lease lapsed, or they were never claimed, or handed over) that are
   * still `running`, for the caller to claim (a takeover). Due by Redis's clock (run-due-read-1.lua), the one every
   * due time was set in (`markDue`). Due entries of sessions that are not running (or gone)
   * are dropped (`end`), once `settle` has done what such a run left (a process killed after its last commit and
   * before its `end`: the spend that commit billed, src/engine/commit.ts). `busy`: runs this process drives (not
   * read); `load` reads a session. `settle` answers false when it could not (it said why): that session is ended
   * all the same but left due SETTLE_RETRY_MS later, and the pass goes on, so one tenant's broken ledger holds up no
   * other's takeovers.
   */
  async sweep(
    limit: number,
    busy: (id: string) => boolean,
    load: (id: string) => Promise<SessionState | null>,
    settle?: (state: SessionState) => Promise<boolean>,
  ): Promise<string[]> {
    const due = await this.redis.sessRunDueRead(RUNS_KEY, limit);
    const out: string[] = [];
    for (const id of due) {
      if (busy(id)) continue;
      const state = await load(id);
      if (state?.status === 'running') {
        out.push(id);
        continue;
      }
      const settled = !state || !settle || (await settle(state));
      await this.end(id, state?.tenant);
      // Its slot given back and its tree member woken all the same; only the due entry stays, for the retry.
      if (!settled) await this.markDue(id, SETTLE_RETRY_MS);
    }
    return out;
  }

  /**
   * The lease part of `heartbeat` (renew-1.lua). Not private only so that a test can make a process stop renewing
   * (test/sessions/sessions-concurrency.test.ts); the service calls `heartbeat`.
   */
  renew(id: string, owner: string, fence: number, ttlMs: number): Promise<boolean> {
    return this.redis.sessRenew(sessionKeys(id).lease, `${owner}:${fence}`, ttlMs).then((r) => r === 1);
  }

  /**
   * The run is due `inMs` from now of Redis's clock (run-due-set-1.lua; one EVALSHA, as the ZADD it replaces), the
   * clock the sweep compares with (run-due-read-1.lua): a replica's own clock, 10 minutes ahead, made its hand-over
   * and its crash's runs due for the others only 10 minutes later (one behind: at once, a claim refused by the live
   * lease every sweep). The lease itself (acquire-run-4.lua's PX, renew-1.lua's PEXPIRE) was always Redis's.
   */
  private markDue(id: string, inMs: number): Promise<number> {
    return this.redis.sessRunDueSet(RUNS_KEY, id, inMs);
  }

  /**
   * Takes a slot among the tenant's active runs for session `id`, or throws 429 `quota_exceeded`
   * (`details.quota: "TENANT_MAX_ACTIVE_RUNS"`). The count lives in Redis (tenantRunsKey), so it holds across
   * replicas; it cannot join the session's script (another hash tag), so a slot may outlive its run (a crash
   * between a run's last commit and `end`, a start refused after its slot was taken). At the limit, such slots
   * are found by reading their sessions — a slot whose session is not `running` is stale — and dropped, so the
   * count is the number of running sessions, whatever crashed. Without a tenant (a session not written yet), or
   * with no limit, nothing is counted. The take answers, when refused, the slots older than RUN_SLOT_GRACE_MS by
   * Redis's clock (run-slot-take-1.lua): the candidates, read in the same round trip.
   */
  private async takeRunSlot(tenant: string | null, id: string): Promise<void> {
    const max = this.tenantMaxActiveRuns;
    if (max <= 0 || tenant === null) return;
    const key = tenantRunsKey(tenant);
    for (let attempt = 0; ; attempt++) {
      const rows = await this.redis.sessRunSlotTake(key, id, RUN_SLOT_GRACE_MS, max);
      if (rows === 1) return;
      if (attempt > 0) throw quotaExceeded('TENANT_MAX_ACTIVE_RUNS', max, 'active runs');
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

  /**
   * Counts a session that is running among its tenant's active runs, without a check (see `takeRunSlot`), dated by
   * Redis's now (run-slot-hold-1.lua: one EVALSHA, as the ZADD it replaces).
   */
  private async holdRunSlot(tenant: string, id: string): Promise<void> {
    if (this.tenantMaxActiveRuns > 0) await this.redis.sessRunSlotHold(tenantRunsKey(tenant), id);
  }
}
