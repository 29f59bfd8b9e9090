import type { FastifyBaseLogger as Logger } from 'fastify';
import { SessionExists, badRequest, isQuota, isRefusal, quotaExceeded, zodDetails } from '../errors.js';
import { createSessionBody } from '../schemas.js';
import { createSession } from '../sessions/create.js';
import type { SessionDeps } from '../sessions/mutate.js';
import type { SessionStore } from '../store/store.js';
import { newestMissed, nextFire, type Timing } from './cron.js';
import { fireSessionId, type ScheduleRecord } from './keys.js';
import type { ScheduleStore } from './store.js';
import { SweepLoop } from '../sweep-loop.js';
import { FailureLog } from '../log.js';

/**
 * How long the replica that claimed a fire has to create its session before any other replica retries it; also the
 * pause between a fire's tries while its tenant's runs are all busy.
 */
const FIRE_LEASE_MS = 10_000;
/** How long a one-shot (`at`) fire is tried again while its tenant's runs are all busy (a cron's: until its next). */
const ONE_SHOT_RETRY_MS = 3_600_000;
const SWEEP_BATCH = 200;
/** Due schedules looked at (claimed, their sessions created) at once by one replica. */
const FIRE_PARALLEL = 8;
/**
 * Of those, one tenant's at most: a tenant whose fires are slow (its MCP server takes its connect timeout) holds
 * half the places, never all, and another tenant's fires go on in the rest.
 */
const FIRE_PER_TENANT = 4;
/**
 * How long a sweep waits for the fires it started before the next sweep may start more: a slow fire keeps its
 * place in the pool past it, while schedules that come due meanwhile are looked at.
 */
const SWEEP_WAIT_MS = 1000;
/**
 * How often a replica settles the schedules' byte charges left by writes whose process died between their steps
 * (store.ts `settleCharges`, due a minute after such a write: charges.ts CHARGE_GRACE_MS).
 */
const CHARGES_SWEEP_MS = 10_000;
/** How often a replica's scheduler beats into `schedules:alive`, and the silence after which it was an outage. */
const BEAT_MS = 1000;
const OUTAGE_GAP_MS = 15_000;

export interface SchedulerOptions {
  store: ScheduleStore;
  sessions: SessionStore;
  /** What a create needs (src/sessions/create.ts). */
  deps: SessionDeps;
  log: Logger;
  sweepMs: number;
  /** TENANT_MAX_SESSIONS (0: none): scheduled sessions count like created ones. */
  maxSessions: number;
}

const timingOf = (s: ScheduleRecord): Timing => ({ cron: s.cron, at: s.at, timezone: s.timezone });

/**
 * The ids in turn order, tenants round robin (each tenant's ids in the order given): one tenant's many due
 * schedules do not make another tenant's wait behind all of them.
 */
export function roundRobin(items: ReadonlyArray<readonly [id: string, tenant: string]>): string[] {
  const byTenant = new Map<string, string[]>();
  for (const [id, tenant] of items) {
    const list = byTenant.get(tenant);
    if (list) list.push(id);
    else byTenant.set(tenant, [id]);
  }
  const out: string[] = [];
  for (let i = 0; out.length < items.length; i++)
    for (const list of byTenant.values()) if (i < list.length) out.push(list[i]!);
  return out;
}

/**
 * Fires schedules. Every replica sweeps `schedules:due`; for a schedule due now, claim-2.lua takes the fire once
 * (the schedule's `next_run_at` as the guard) and moves the schedule to its next time in the same script; the fire
 * stays `pending` until finish-3.lua records its session. The session's id is derived from the fire (schedule id +
 * time), so a replica killed between the claim and the create leaves a pending fire that another replica retries
 * once its lease is over (retake-1.lua hands the lease to one of them): the retry finds the session (or creates
 * it), never a second one.
 *
 * A replica looks at up to FIRE_PARALLEL due schedules at once (FIRE_PER_TENANT of one tenant), tenants taking
 * turns; a slow fire holds its place, not the sweeps. A fire that came due while
 * some replica ran is created for its own time however late it is (a backlog is no outage); only fires that came
 * due while no replica ran (before `since` of `schedules:alive`, which every replica's beat keeps, see
 * alive-1.lua) collapse into one.
 */
export class Scheduler {
  private readonly loop: SweepLoop;
  private readonly charges: SweepLoop;
  private beat: NodeJS.Timeout | undefined;
  /** The ticks in flight in this process, by schedule, and how many per tenant. */
  private readonly ticks = new Map<string, Promise<void>>();
  private readonly tenantTicks = new Map<string, number>();
  /** Since when replicas have run without a gap, as this replica's last beat read it. */
  private since = Infinity;
  constructor(private readonly opts: SchedulerOptions) {
    this.loop = new SweepLoop(() => this.sweep(), opts.sweepMs, new FailureLog(opts.log, 'schedule sweep'));
    // Apart from the fires' sweep: a failing settle never holds fires back.
    this.charges = new SweepLoop(
      () => opts.store.settleCharges(),
      CHARGES_SWEEP_MS,
      new FailureLog(opts.log, 'schedule charges sweep'),
    );
  }

  start(): void {
    // Beats apart from the sweeps: a long sweep (a backlog of fires) is no gap.
    this.beat = setInterval(() => {
      // A failing beat forgets `since`: the next sweep reads it again itself (or fails, and logs it), so fires due
      // during an outage are never taken for fires due while replicas ran.
      this.alive().catch(() => void (this.since = Infinity));
    }, BEAT_MS).unref();
    this.loop.start();
    this.charges.start();
  }

  async stop(): Promise<void> {
    clearInterval(this.beat);
    await Promise.all([this.loop.stop(), this.charges.stop()]);
    await Promise.all(this.ticks.values());
  }

  private async alive(): Promise<void> {
    this.since = await this.opts.store.alive(OUTAGE_GAP_MS);
  }

  /**
   * Starts ticks of the due schedules, tenants taking turns, into this process's pool (FIRE_PARALLEL places,
   * FIRE_PER_TENANT of them per tenant): a tick that ends lets the next due one in; the sweep returns when nothing it
   * read waits for a place, or after SWEEP_WAIT_MS while slow ticks still run.
   */
  private async sweep(): Promise<void> {
    // The beat keeps `since` fresh; the first sweep of a replica, or the first after a failed beat, reads it itself.
    if (this.since === Infinity) await this.alive();
    const since = this.since;
    const { store } = this.opts;
    if (this.ticks.size >= FIRE_PARALLEL) return;
    // The read sets the process's reckoning of Redis's clock (`now()`).
    const due = await store.due(SWEEP_BATCH);
    const ids = due.ids.filter((id) => !this.ticks.has(id));
    if (ids.length === 0) return;
    const tenants = await store.tenantsOf(ids);
    const tenantOf = new Map(ids.map((id, i) => [id, tenants[i] ?? ''] as const));
    const queue = roundRobin(ids.map((id) => [id, tenantOf.get(id)!] as const));
    let active = 0;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, SWEEP_WAIT_MS).unref();
      const pump = () => {
        for (let k = 0; k < queue.length && this.ticks.size < FIRE_PARALLEL && !this.loop.stopping;) {
          const id = queue[k]!;
          const tenant = tenantOf.get(id)!;
          if ((this.tenantTicks.get(tenant) ?? 0) >= FIRE_PER_TENANT) {
            k++;
            continue;
          }
          queue.splice(k, 1);
          // Started meanwhile by a later sweep (this pump runs on after its sweep returned).
          if (this.ticks.has(id)) continue;
          active++;
          void this.launch(id, tenant, since).finally(() => {
            active--;
            pump();
          });
        }
        if (active === 0) {
          clearTimeout(timer);
          resolve();
        }
      };
      pump();
    });
  }

  /** One tick in the pool: its place is held until it ends. */
  private launch(id: string, tenant: string, since: number): Promise<void> {
    this.tenantTicks.set(tenant, (this.tenantTicks.get(tenant) ?? 0) + 1);
    const tick: Promise<void> = this.tick(id, since)
      .catch((err: unknown) => this.opts.log.warn({ err, schedule: id }, 'schedule tick failed'))
      .finally(() => {
        this.ticks.delete(id);
        const left = (this.tenantTicks.get(tenant) ?? 1) - 1;
        if (left > 0) this.tenantTicks.set(tenant, left);
        else this.tenantTicks.delete(tenant);
      });
    this.ticks.set(id, tick);
    return tick;
  }

  /**
   * Looks at one due schedule: retries its pending fire, or claims the fire now due; then re-files it. `since`: the
   * start of the unbroken run of replicas, as the sweep read it.
   */
  private async tick(id: string, since: number): Promise<void> {
    const { store } = this.opts;
    const s = await store.read(id);
    const now = this.now();
    // Whether this tick changed the record's timing (a claim, a retake).
    let wrote = false;
    if (s && s.pending !== null && s.pendingUntil <= now) {
      // One replica per lease period retries it; the fire's session id keeps a retry after a slow one from creating twice.
      wrote = await store.retake(id, s.pending, FIRE_LEASE_MS);
      if (wrote) await this.fire(s, s.pending, s.nextRunAt);
    } else if (s && s.pending === null && !s.paused && s.nextRunAt !== null && s.nextRunAt <= now) {
      const t = timingOf(s);
      // A fire of the timing a PATCH replaced, due when it landed (routes/schedules.ts `patchOnce`): fired at its
      // own time, then the schedule goes on at the new timing's first fire as the PATCH computed it, from its now.
      const kept = s.nextAfterDue !== undefined;
      // Due while replicas ran: its own time, however late. Due before (an outage): the newest fire of the
      // outage, once; the fires after it come due one by one.
      const fireAt =
        kept || s.nextRunAt >= since ? s.nextRunAt : newestMissed(t, s.nextRunAt, Math.min(now, since - 1));
      const next = s.nextAfterDue !== undefined ? s.nextAfterDue : nextFire(t, fireAt);
      const running = await this.lastStillRuns(s);
      const decision = running ? 'skip' : 'fire';
      const skipped = {
        schedule_id: s.id,
        scheduled_for: new Date(fireAt).toISOString(),
        reason: 'overlap',
        session_id: s.lastSession,
      };
      const r = await store.claim(s, fireAt, next, decision, FIRE_LEASE_MS, skipped);
      wrote = r === 'ok';
      if (r === 'ok' && decision === 'fire') await this.fire(s, fireAt, next);
      if (r === 'ok')
        this.opts.log.info({ schedule: id, tenant: s.tenant, fireAt, decision }, 'schedule fire');
    }
    // Guarded by the due entry as read before the record (`resync`): a tick that did nothing, because another
    // replica's fire was pending as it read, files nothing over that replica's filing of the next fire.
    await store.resync(id, wrote);
  }

  /**
   * Redis's clock as this process reckons it (src/redis/clock.ts; its due reads set it), so a replica whose clock
   * is off neither fires early nor takes a pending fire's live lease for over (the scripts check both against
   * Redis's TIME themselves; this keeps the pre-checks and the retry window in step).
   */
  private now(): number {
    return this.opts.sessions.clock.now();
  }

  /** With overlap `skip`: whether the session of the schedule's last fire still runs (or waits for a client). */
  private async lastStillRuns(s: ScheduleRecord): Promise<boolean> {
    if (s.overlap === 'allow' || !s.lastSession) return false;
    const last = await this.opts.sessions.load(s.lastSession);
    return last !== null && (last.status === 'running' || last.status === 'requires_action');
  }

  /**
   * Creates the fire's session through the create path (quotas, checks) under its deterministic id, then ends the
   * pending fire. A 4xx of the create (a quota, a tool since deleted) ends it as skipped with that reason, but for
   * TENANT_MAX_ACTIVE_RUNS (its runs are busy for now: a 09:00 burst past the limit would lose the rest for the day)
   * until the schedule's next fire (`nextAt`; a one-shot's: ONE_SHOT_RETRY_MS): it stays pending, tried again after
   * the lease. Anything else leaves it pending, retried after the lease.
   */
  private async fire(s: ScheduleRecord, fireAt: number, nextAt: number | null): Promise<void> {
    const { sessions, deps, store, maxSessions } = this.opts;
    const sessionId = fireSessionId(s.id, fireAt);
    const scheduledFor = new Date(fireAt).toISOString();
    const base = { schedule_id: s.id, scheduled_for: scheduledFor };
    try {
      if ((await sessions.load(sessionId)) === null) {
        if (maxSessions > 0 && (await sessions.index.count(s.tenant)) >= maxSessions)
          throw quotaExceeded('TENANT_MAX_SESSIONS', maxSessions, 'sessions');
        const given = JSON.parse(s.session) as { metadata?: Record<string, unknown> };
        const body = createSessionBody.safeParse({ ...given, metadata: { ...given.metadata, ...base } });
        if (!body.success)
          throw badRequest("The schedule's session body is refused.", zodDetails(body.error.issues));
        await createSession(deps, s.tenant, body.data, sessionId);
      }
    } catch (err) {
      if (!(err instanceof SessionExists)) {
        if (!isRefusal(err)) throw err;
        if (isQuota(err, 'TENANT_MAX_ACTIVE_RUNS') && this.now() < (nextAt ?? fireAt + ONE_SHOT_RETRY_MS)) {
          this.opts.log.info(
            { schedule: s.id, tenant: s.tenant, fireAt },
            'schedule fire waits for a run slot',
          );
          return;
        }
        const error = { code: err.code, message: err.message, details: err.details };
        await store.finish(s, fireAt, 'skipped', '', { ...base, reason: err.code, error });
        return;
      }
    }
    await store.finish(s, fireAt, 'fired', sessionId, {
      ...base,
      session_id: sessionId,
      late_ms: Math.max(0, this.now() - fireAt),
    });
  }
}
