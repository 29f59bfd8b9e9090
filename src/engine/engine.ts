import type { ModelClient } from '../model-client.js';
import type { ServerTool } from '../../tools/types.js';
import { Metrics } from '../observability/metrics.js';
import { RunTelemetry } from '../observability/run-telemetry.js';
import { Tracing } from '../observability/tracing.js';
import type { Toolbox } from '../toolbox.js';
import type { SessionChannels } from '../store/channels.js';
import type { SessionStore } from '../store/store.js';
import type { TaskQueue } from '../tenant-tools/tasks.js';
import { RunHandle, type EngineLogger } from './run-handle.js';
import type { LiveNews } from './live-news.js';
import { Run, controlListener, type DriveDeps } from './run.js';
import { FailureLog } from '../log.js';

export interface EngineOptions {
  store: SessionStore;
  client: ModelClient;
  /** The sessions' pub/sub channels: control messages of the runs here arrive on them. */
  channels: SessionChannels;
  serverTools: ReadonlyMap<string, ServerTool>;
  toolbox: Toolbox;
  logger: EngineLogger;
  owner: string;
  /** Run lease TTL (ms); renewed every third of it. A crashed owner's runs are claimed after at most this. */
  leaseTtlMs: number;
  /** How often each replica looks for runs whose lease expired (ms). */
  sweepIntervalMs?: number;
  /** Stream deltas are written to Redis as they arrive, at most this many per pipelined batch. */
  streamBatchEvents?: number;
  /**
   * Most runs this process drives at once (MAX_ACTIVE_RUNS). Runs kicked beyond it wait for a slot, oldest first,
   * in a short list of ids here and, durably, in `runs:due`, where any replica with room claims them once due.
   */
  maxActiveRuns?: number;
  /** Where the runs' metrics go (default: a registry of their own) and their spans (default: none). */
  metrics?: Metrics;
  tracing?: Tracing;
  /** The tenant tools' task queue: calls of tenant tools become tasks there. */
  tasks?: TaskQueue;
}

/** Runs waiting here for a slot (ids only; `runs:due` is their durable record, which any replica sweeps). */
const MAX_WAITING = 10_000;

/**
 * Runs sessions: one run per session at a time across all processes (lease + fencing token), each run driven by a
 * fresh SDK tool runner built from the persisted history, every iteration committed to Redis before the next turn.
 * This file admits runs (the limit, the waiting list), claims them (the lease), sweeps for runs whose owner is gone,
 * and stops; `run.ts` drives a claimed run.
 */
export class Engine {
  private readonly active = new Map<string, RunHandle>();
  private readonly rekick = new Set<string>();
  /** Runs kicked while this process was at its admission limit, oldest first. */
  private readonly waiting = new Set<string>();
  /** Runs whose claim is in flight here (lease requested, run not started): they count against the limit. */
  private readonly claiming = new Set<string>();
  /** Runs kicked while their claim was in flight here: claimed again should that claim not take the run. */
  private readonly reclaim = new Set<string>();
  private stopping = false;
  private sweepTimer: NodeJS.Timeout | null = null;
  private readonly sweepIntervalMs: number;
  private readonly maxActiveRuns: number;
  private readonly deps: DriveDeps;
  private readonly sweepFailures: FailureLog;

  constructor(options: EngineOptions) {
    const {
      sweepIntervalMs = 1000,
      streamBatchEvents = 256,
      maxActiveRuns = 5000,
      metrics = new Metrics({ defaultMetrics: false }),
      tracing = Tracing.off,
      ...rest
    } = options;
    this.sweepIntervalMs = sweepIntervalMs;
    this.maxActiveRuns = maxActiveRuns;
    this.sweepFailures = new FailureLog(rest.logger, 'sweep');
    this.deps = {
      ...rest,
      streamBatchEvents,
      metrics,
      tracing,
      stopping: () => this.stopping,
      kick: (id) => this.kick(id),
    };
    options.channels.onControl(controlListener(this.active));
  }

  get store(): SessionStore {
    return this.deps.store;
  }

  get activeRuns(): number {
    return this.active.size;
  }

  /** Runs waiting in this process for an admission slot. */
  get waitingRuns(): number {
    return this.waiting.size;
  }

  isRunningHere(id: string): boolean {
    return this.active.has(id);
  }

  /** The run of session `id` in this process, if it runs here; its `done` settles after its end (its release). */
  runHere(id: string): RunHandle | undefined {
    return this.active.get(id);
  }

  /** The live news of the session's run in this process (live-news.ts), if it runs here. */
  liveNews(id: string): LiveNews | undefined {
    return this.active.get(id)?.news;
  }

  start(): void {
    const sweep = () => {
      this.sweep()
        .then(
          () => this.sweepFailures.ok(),
          (err: unknown) => this.sweepFailures.failed(err),
        )
        .finally(() => {
          if (!this.stopping) this.sweepTimer = setTimeout(sweep, this.sweepIntervalMs);
        });
    };
    this.sweepTimer = setTimeout(sweep, 50);
  }

  /** Claims runs whose owner is gone (crash, lost lease): every replica does this, the lease picks one. */
  private async sweep(): Promise<void> {
    if (this.stopping) return;
    const { store } = this.deps;
    // A run claimed, being claimed or waiting for a slot here is no lapsed run: the sweep neither loads it nor claims
    // it again (a claim that took longer than its start's due delay, on a busy loop, looked lapsed).
    const lapsed = await store.runs.sweep(
      20,
      (id) => this.active.has(id) || this.claiming.has(id) || this.waiting.has(id),
      (id) => store.load(id),
      // A run that ended (its last commit landed) and died before its end: the turns its commits billed may not be
      // in its tenant's day yet (src/engine/commit.ts `commit`; a record that failed without a crash too). Recorded
      // once, oldest first; on a failure the session is left due for a later pass, and this one goes on.
      async (s) => {
        if (s.spendOpen.length === 0) return true;
        try {
          await store.spend.recordOpen(s.tenant, s.id, s.spendOpen);
          return true;
        } catch (err) {
          this.deps.logger.warn(
            { err, session: s.id, tenant: s.tenant },
            "open spend not recorded in the tenant's day; tried again later",
          );
          return false;
        }
      },
    );
    for (const id of lapsed) this.kick(id, true);
  }

  /** Tries to take the run of a `running` session in this process. Returns at once; the run goes on in the background. */
  kick(id: string, swept = false): void {
    if (this.stopping) return;
    if (this.active.has(id)) {
      // The run here is finishing (its last commit released the lease); claim again once it has returned.
      this.rekick.add(id);
      return;
    }
    // A claim of it in flight here reads the session once it holds the lease, so a second claim now would only be
    // refused; but that claim may fail (the lease still held by an owner finishing elsewhere, whose late `end` may
    // then clear the run's due entry): claim once more after it, unless it took the run.
    if (this.claiming.has(id)) {
      this.reclaim.add(id);
      return;
    }
    if (this.active.size + this.claiming.size >= this.maxActiveRuns || this.waiting.size > 0) {
      // At the limit (or others wait already, first come first served): wait for a slot. Should this process
      // die meanwhile, the run is still due in `runs:due`.
      if (this.waiting.size < MAX_WAITING) this.waiting.add(id);
      this.admitWaiting();
      return;
    }
    this.startClaim(id, swept);
  }

  /** `swept`: the due sweep found the run (its owner is gone or handed it over), so a claim is a takeover. */
  private startClaim(id: string, swept = false): void {
    this.claiming.add(id);
    void this.claim(id, swept)
      .catch((err) => this.deps.logger.error({ err, session: id }, 'claim failed'))
      .finally(() => {
        this.claiming.delete(id);
        if (this.reclaim.delete(id) && !this.active.has(id)) this.kick(id);
        this.admitWaiting();
      });
  }

  /** Claims waiting runs, oldest first, while there are slots. */
  private admitWaiting(): void {
    if (this.stopping) return;
    for (const id of this.waiting) {
      if (this.active.size + this.claiming.size >= this.maxActiveRuns) return;
      this.waiting.delete(id);
      if (this.active.has(id)) this.rekick.add(id);
      else this.startClaim(id);
    }
  }

  private async claim(id: string, swept: boolean): Promise<void> {
    const { store, owner, leaseTtlMs } = this.deps;
    const claimed = await store.runs.claim(id, owner, leaseTtlMs);
    if (!claimed) return;
    if (swept) this.deps.metrics.leaseTakeovers.inc();
    if (this.stopping || this.active.has(id)) {
      await store.runs.release(id, owner, claimed.fence);
      return;
    }
    const run = new RunHandle(
      id,
      claimed.fence,
      new RunTelemetry(this.deps.metrics, this.deps.tracing, id),
      this.deps,
    );
    this.active.set(id, run);
    run.done = run.obs
      .run(() => new Run(this.deps, run, claimed, swept).drive())
      .finally(() => {
        this.active.delete(id);
        if (this.rekick.delete(id)) this.kick(id);
        this.admitWaiting();
      });
  }

  /** Stops taking runs, lets running ones finish for `graceMs`, then aborts the rest and hands them to other replicas. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    // Waiting runs stay due in `runs:due`: other replicas claim them.
    this.waiting.clear();
    const runs = [...this.active.values()];
    const all = Promise.allSettled(runs.map((r) => r.done));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), graceMs))),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      for (const r of this.active.values()) r.abort('shutdown');
      await Promise.allSettled([...this.active.values()].map((r) => r.done));
    }
  }
}
