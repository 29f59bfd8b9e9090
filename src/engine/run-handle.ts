import type { ModelClient } from '../model-client.js';
import type { FastifyBaseLogger } from 'fastify';
import type { ServerTool } from '../../tools/types.js';
import type { Metrics } from '../observability/metrics.js';
import type { RunTelemetry } from '../observability/run-telemetry.js';
import type { Tracing } from '../observability/tracing.js';
import type { Toolbox } from '../toolbox.js';
import type { SessionStore } from '../store/store.js';
import type { TaskQueue } from '../tenant-tools/tasks.js';
import { LiveNews } from './live-news.js';
import type { OpenSpend } from '../cost/spend.js';

/** Why a run's AbortController fired. */
export type AbortReason = 'cancel' | 'interrupt' | 'shutdown' | 'fenced' | 'deleted';

export type EngineLogger = FastifyBaseLogger;

/** What every phase of a run works with: the shared clients and the engine's settings. */
export interface RunDeps {
  store: SessionStore;
  client: ModelClient;
  serverTools: ReadonlyMap<string, ServerTool>;
  /** Every source of tools the service runs (server tools, MCP servers, …), resolved per session at each step. */
  toolbox: Toolbox;
  /** Run lease TTL (ms); renewed every third of it. A crashed owner's runs are claimed after at most this. */
  leaseTtlMs: number;
  /** Stream deltas are written to Redis as they arrive, at most this many per pipelined batch. */
  streamBatchEvents: number;
  metrics: Metrics;
  tracing: Tracing;
  /** The tool tasks of tenant tools (absent: a call of one is answered with an error). */
  tasks?: TaskQueue;
}

/**
 * One run of one session in this process: the fencing token of its lease, and the AbortController of the turn in
 * flight. A cancel, interrupt, shutdown, lost lease or delete aborts it with its reason; only an interrupt may be
 * overridden by a later reason (it ends one turn, the others end the run).
 */
export class RunHandle {
  controller = new AbortController();
  reason: AbortReason | null = null;
  /** A PATCH changed params or policies: the runner takes them at the next turn boundary. */
  paramsDirty = false;
  done: Promise<void> = Promise.resolve();
  /** The session's tenant, once the run read the session (its turns are added to the tenant's day of spend). */
  tenant: string | null = null;
  /** The run's end was written (src/store/runs.ts `HeldRun.ended`): its heartbeat sends nothing more. */
  ended = false;
  /** The due time the run's own `keep` set last (src/store/runs.ts `HeldRun.due`). */
  due: number | undefined = undefined;

  /** The run's events that change no session field, written as they happen (live-news.ts). */
  readonly news: LiveNews;
  /**
   * Usage counters (usageIncr's, HINCRBY fields) of turns billed but not stored yet: a turn that ended without its
   * reply (a cancel, an interrupt, a cut stream) and a reply whose commit waits for its tools. The run's next commit
   * writes them (src/engine/commit.ts `commit`), so they reach the session's usage, its budget and the tenant's day
   * once; lost only with the process (a takeover sends the turn again, unbilled here). A delete of the session
   * leaves no next commit: the run's end adds them to the tenant's day alone (commit.ts `billDeleted`).
   */
  unbilled: Record<string, number> | null = null;
  /**
   * The highest seq of the session's spend known to be in its tenant's day (src/cost/spend.ts OpenSpend), recorded by
   * this run (its claim, its commits) through it in seq order; null: none yet. The run's next billed commit passes it
   * (`spend_recorded`: the session's `spend_open` keeps only the turns above it), and its end's release drops the
   * entries at or below it (src/store/runs.ts `release`).
   */
  spendRecorded: number | null = null;
  /**
   * The session's turns, oldest first, whose record failed without a crash (a Redis error on the tenant's slot): the
   * claim's record of the open spend it found, or a commit's of its turn (src/engine/commit.ts `recordOpenSpend`).
   * They are still in the session's `spend_open` (every seq committed stays there until a record through it
   * succeeded); the run's next record sends them first, then its new turn: record-2.lua refuses a seq below one
   * recorded, and counts a seq at most once, so one whose record landed though its answer was lost adds nothing.
   * The run's end sends them once more before its release (not after a delete of the session); still failing, they
   * stay in `spend_open` for the session's next claim. At most SPEND_OPEN_MAX, as the field.
   */
  spendUnrecorded: OpenSpend[] = [];
  /**
   * The pending step this run committed with its reply (turns.ts, a step that waits) has queued no tool task yet:
   * the tool step that runs it next takes it as fresh (src/engine/tool-tasks.ts `queueTasks`), and clears this.
   */
  freshStep = false;

  constructor(
    readonly id: string,
    readonly fence: number,
    /** The run's metrics and spans. */
    readonly obs: RunTelemetry,
    deps: Pick<RunDeps, 'store' | 'leaseTtlMs'>,
  ) {
    this.news = new LiveNews(
      deps.store,
      id,
      fence,
      deps.leaseTtlMs,
      () => this.reason !== null && this.reason !== 'interrupt',
      (n, reason) => obs.liveEventsDropped(n, reason),
    );
  }

  /** Adds `incr` to what the next commit bills (`unbilled`). */
  bill(incr: Record<string, number>): void {
    const sum = { ...this.unbilled };
    for (const [k, n] of Object.entries(incr)) sum[k] = (sum[k] ?? 0) + n;
    this.unbilled = sum;
  }

  abort(reason: AbortReason): void {
    if (this.reason && this.reason !== 'interrupt') return;
    this.reason = reason;
    this.controller.abort(reason);
  }

  /**
   * Whether tools cut short now must stay unanswered: after a shutdown, a lost lease or a delete this process may not
   * commit their (aborted) results — the pending step keeps them `started`, and the replica that resumes the run runs
   * the idempotent ones again and answers the others "interrupted". (A lost lease whose fence still matches, after a
   * Redis restart dropped the lease key, would otherwise commit "Error: aborted" as a tool's result.)
   */
  get leavesToolsUnanswered(): boolean {
    return this.reason === 'shutdown' || this.reason === 'fenced' || this.reason === 'deleted';
  }

  /** A fresh controller for each runner: an interrupt aborts one turn, not the run. */
  rearm(): void {
    if (!this.controller.signal.aborted) return;
    this.controller = new AbortController();
    this.reason = null;
  }
}
