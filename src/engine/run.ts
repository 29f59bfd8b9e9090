import { FencedOut } from '../errors.js';
import { pendingToolCalls } from '../history.js';
import type { SessionChannels } from '../store/channels.js';
import type { SessionState } from '../store/session-state.js';
import { isStoreDown } from '../store/unavailable.js';
import { upstreamContext, type UpstreamContext } from '../observability/upstream-fetch.js';
import { TENANT_BUDGET_EXHAUSTED } from '../cost/spend.js';
import { budgetExhausted, spentOf, stopForBudget } from './budget.js';
import { CommitLanded, cancelSession, commit, commitInterrupt, fail, finish } from './commit.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { endsWithSummary, isUnfinished, leftoverCompaction } from './compaction.js';
import { runCompactionOnly } from './compaction-run.js';
import { toolStep } from './tool-step.js';
import { runTurns } from './turns.js';
import { isAbort, isStreamCut, upstreamError } from './upstream.js';

/** Our own retries of a turn whose stream was cut after it started (the SDK retries only before it starts). */
const STREAM_CUT_RETRIES = 2;

export interface DriveDeps extends RunDeps {
  /** The sessions' pub/sub channels: control messages of the runs here arrive on them. */
  channels: SessionChannels;
  owner: string;
  logger: EngineLogger;
  /** The engine is stopping: a run ends once its turn is done or aborted. */
  stopping: () => boolean;
  /** Claims the run of a session again once this run has returned (a compaction asked for as it ended). */
  kick?: (id: string) => void;
}

/**
 * Routes control messages (`ctl:{id}`, published by the routes) to the run of that session in this process:
 * `params` marks its params stale, `cancel`/`interrupt`/`delete` abort its turn with that reason.
 */
export function controlListener(active: ReadonlyMap<string, RunHandle>) {
  return (id: string, message: string): void => {
    const run = active.get(id);
    if (!run) return;
    if (message === 'params') run.paramsDirty = true;
    else if (message === 'cancel' || message === 'interrupt') run.abort(message);
    else if (message === 'delete') run.abort('deleted');
  };
}

/** Renews the run's lease (and its due time) every third of the TTL; a lost lease aborts the run as `fenced`. */
function renewLease(deps: DriveDeps, run: RunHandle, log: EngineLogger): NodeJS.Timeout {
  const { store, leaseTtlMs, owner } = deps;
  return setInterval(
    () => {
      Promise.all([
        store.runs.renew(run.id, owner, run.fence, leaseTtlMs),
        store.runs.markDue(run.id, Date.now() + leaseTtlMs),
      ])
        .then(([ok]) => {
          if (!ok) run.abort('fenced');
        })
        .catch((err) => log.warn({ err }, 'lease renewal failed'));
    },
    Math.floor(leaseTtlMs / 3),
  );
}

/** The run: tool steps and runner turns until the session leaves `running` or this process loses it. */
export function drive(deps: DriveDeps, run: RunHandle): Promise<void> {
  // The upstream requests of this run (made deep in the SDK) log which session and tenant they were for.
  const ctx: UpstreamContext = { session: run.id, tenant: null };
  return upstreamContext.run(ctx, () => driveRun(deps, run, ctx));
}

async function driveRun(deps: DriveDeps, run: RunHandle, ctx: UpstreamContext): Promise<void> {
  const { store, leaseTtlMs, owner } = deps;
  const log = deps.logger.child({ session: run.id });
  const renew = renewLease(deps, run, log);
  await deps.channels.watchControl(run.id).catch((err) => log.warn({ err }, 'subscribe failed'));
  let cutRetries = 0;
  let counted = false;
  const started = Date.now();
  try {
    await store.runs.markDue(run.id, Date.now() + leaseTtlMs);
    while (!deps.stopping() || run.reason === null) {
      const state = await store.load(run.id);
      if (!state || state.status !== 'running' || state.fence !== run.fence) return;
      run.tenant = state.tenant;
      if (!counted) {
        // The session runs: it counts among its tenant's active runs whatever happened to its slot (a run taken over
        // after a crash, an end of an earlier run that gave the slot back after this start took it).
        counted = true;
        ctx.tenant = state.tenant;
        await store.runs.holdRunSlot(state.tenant, run.id);
        log.info({ tenant: state.tenant, iteration: state.iteration, fence: run.fence }, 'run started');
      }
      if (state.control === 'cancel' || run.reason === 'cancel') {
        // The history stays valid; see cancelSession.
        await cancelSession(store, state, { fence: run.fence });
        await store.runs.unmarkDue(run.id, state.tenant);
        return;
      }
      if (run.reason === 'shutdown' || run.reason === 'fenced' || run.reason === 'deleted') return;
      run.rearm();
      try {
        const next = await step(deps, run, state, log);
        cutRetries = 0;
        if (next === 'done') {
          // A compaction asked for during the run's last turn is a run of its own (claimed once this one returned).
          if (await leftoverCompaction(deps, run.id)) deps.kick?.(run.id);
          return;
        }
      } catch (err) {
        if (err instanceof FencedOut) return;
        if (isAbort(err, run)) {
          if (run.reason === 'interrupt') {
            await commitInterrupt(deps, run);
            continue;
          }
          if (run.reason === 'cancel') continue; // the loop's top finishes the cancel
          return;
        }
        // A commit that the store turned out to have applied after all: go on from what it holds.
        if (err instanceof CommitLanded) continue;
        // The store stayed unreachable longer than a commit waits: leave the run for recovery (the session is
        // still `running` and due), rather than failing the session for a Redis outage.
        if (isStoreDown(err)) throw err;
        if (isStreamCut(err) && cutRetries < STREAM_CUT_RETRIES) {
          cutRetries++;
          log.warn({ err, attempt: cutRetries }, 'stream cut mid-turn; sending the turn again');
          continue;
        }
        const error = upstreamError(err);
        // The session shows a generic message for an internal error: its cause is only here, in the log.
        if (error.code === 'internal_error') log.error({ err }, 'run failed with an internal error');
        await fail(deps, run, error, log);
        return;
      }
    }
  } catch (err) {
    if (!(err instanceof FencedOut)) log.error({ err }, 'run crashed; the session is left for recovery');
  } finally {
    clearInterval(renew);
    await deps.channels.unwatchControl(run.id);
    await store.runs.release(run.id, owner, run.fence).catch(() => {});
    // Handed over: any replica may claim it now rather than after the lease TTL.
    if (run.reason === 'shutdown') await store.runs.markDue(run.id, Date.now()).catch(() => {});
    // Last: nothing of this run writes after this line. `abort`: null when the run ended by itself (the session
    // left `running`), else why this process stopped it.
    if (counted) log.info({ abort: run.reason, ms: Date.now() - started }, 'run ended');
  }
}

/** Whether the session's last model reply stopped unfinished (`pause_turn`, `compaction`): the API continues it. */
async function pausedReply(deps: DriveDeps, id: string): Promise<boolean> {
  const [lastRecord] = await deps.store.iterationRecords(id, -1, -1);
  return lastRecord !== undefined && lastRecord.kind !== 'compaction' && isUnfinished(lastRecord.stop_reason);
}

/** One step of a run: answer a pending tool step, or run the SDK's runner until it stops or needs a client. */
async function step(
  deps: DriveDeps,
  run: RunHandle,
  state: SessionState,
  log: EngineLogger,
): Promise<'done' | 'again'> {
  const { store } = deps;
  const history = await store.history(run.id);
  // A compaction asked for while the session was idle or failed: this run only compacts.
  if (state.compactRequest?.resume) return runCompactionOnly(deps, run, state, history, log);
  if (pendingToolCalls(history).length > 0) return toolStep(deps, run, state, history);

  const queued = await store.queueLength(run.id);
  const last = history.at(-1);
  // A turn to send, but the budget is spent: the run stops here (after the last turn's tool results).
  // A summary alone at the end hands the turn back to the model (it answers from it). So does a reply the API
  // paused (`pause_turn`, server-side `compaction`) whose continuation this run has to send: the run that got it
  // died before its next request, or stopped at `max_iterations`. Its iteration record says so (one read, only when
  // the history ends with a reply).
  const paused = last?.role === 'assistant' && (await pausedReply(deps, run.id));
  const turnToSend =
    queued > 0 || (last !== undefined && (last.role !== 'assistant' || endsWithSummary(history) || paused));
  if (turnToSend && budgetExhausted(state.budget, spentOf(state))) {
    await stopForBudget(deps, run, last);
    return 'done';
  }
  // The tenant's daily dollar cap, across replicas: checked before every model request.
  if (turnToSend && (await store.spend.overCap(state.tenant))) {
    await stopForBudget(deps, run, last, TENANT_BUDGET_EXHAUSTED);
    return 'done';
  }
  // A paused reply is resumed before follow-ups join the history: the API refuses a user turn after an assistant turn
  // whose server tool call has no result yet. The runner's reply merges them once the turn ends.
  if (queued > 0 && !paused) {
    // Follow-ups become a user turn: merged onto a trailing user turn, or a new one after an assistant turn.
    await commit(deps, run, { queue: last?.role === 'user' ? { into_last: true } : {} });
    return 'again';
  }
  if (!turnToSend) {
    // Nothing to send: the run is over.
    await finish(deps, run, state, state.stopReason ?? 'end_turn');
    return 'done';
  }
  const budget = state.maxIterations - (state.iteration - state.runStart);
  if (budget <= 0) {
    await finish(deps, run, state, 'max_iterations');
    return 'done';
  }
  return runTurns(deps, run, state, history, budget, log);
}
