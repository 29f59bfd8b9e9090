/**
 * One claimed session's run in this process (`Run`, below) and the routing of its control messages. Over 400 lines:
 * what the run knows of its session without reading it (the claim's state, its own commits' revisions, the lazily
 * read step) is one state that every branch of the loop (tool step, turns, compaction, cancel, takeover) reads and
 * advances, so it stays with the loop; the branches' own work is in tool-step.ts, turns.ts, commit.ts, compaction*.ts.
 */
import { FencedOut, StoreUnavailable } from '../errors.js';
import { extendHistory, pendingToolCalls, type StoredMessage } from '../history.js';
import type { SessionChannels } from '../store/channels.js';
import type { Claimed } from '../store/runs.js';
import { recordCount, type IterationRecord, type SessionState } from '../store/session-state.js';
import {
  upstreamContext,
  upstreamFailureType,
  upstreamStreamFailed,
  type UpstreamContext,
} from '../observability/upstream-fetch.js';
import { APIConnectionError, APIError } from '@anthropic-ai/sdk';
import { TENANT_BUDGET_EXHAUSTED } from '../cost/spend.js';
import { budgetExhausted, spentOf, stopForBudget, unpricedError } from './budget.js';
import {
  CommitLanded,
  billDeleted,
  cancelOwnRun,
  commit,
  commitInterrupt,
  fail,
  finish,
  isPausedReply,
  recordOpenSpend,
} from './commit.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { dueAtStart, endsWithSummary, leftoverCompaction, recordTellsPaused } from './compaction.js';
import { runCompactionOnly } from './compaction-run.js';
import { toolStep } from './tool-step.js';
import { markLostTurn } from './takeover.js';
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

/**
 * The session as the run knows it without reading it: from the claim (which read it with the lease), or from a commit
 * of this run whose revision shows nobody else wrote in between. Null fields are read when needed.
 */
interface Known {
  state: SessionState;
  history: StoredMessage[] | null;
  /** Follow-ups queued; null: not known. */
  queued: number | null;
  /** The session's last iteration record (null: none; undefined: not known). */
  lastRecord: IterationRecord | null | undefined;
  /** `state` is the claim's, without the pending step it holds (Claimed `stepUnread`): read before it is used. */
  stepUnread?: boolean;
}

/**
 * One run of one claimed session in this process: tool steps and runner turns until the session leaves `running` or
 * this process loses it. It holds the session as last read (or as its own commits left it) and reads it again only
 * when that may be stale: after a step whose commits it does not follow (turns, tool steps), or when the revision
 * its commit answers shows another writer.
 */
export class Run {
  /** The run's logger: `session`, and `tenant` once the run has read its session (`before`). */
  private log: EngineLogger;
  private readonly ctx: UpstreamContext;
  private known: Known | null;
  private cutRetries = 0;
  private counted = false;
  /** The run's loop returned: its lease is being let go. */
  private leaving = false;
  private readonly started = Date.now();

  constructor(
    private readonly deps: DriveDeps,
    private readonly run: RunHandle,
    claimed: Claimed,
    /** Claimed by the due sweep (a takeover, a hand-over): the run may not hold its tenant's slot. */
    private readonly swept = false,
  ) {
    this.log = deps.logger.child({ session: run.id });
    // The upstream requests of this run (made deep in the SDK) log which session, tenant, iteration and model they
    // were for; an abort of the run's own (cancel, interrupt, …) is told from the SDK's timeout by the run's signal.
    this.ctx = { session: run.id, tenant: null, ownAbort: () => run.controller.signal.aborted };
    this.known = {
      state: claimed.state,
      history: null,
      queued: claimed.queued,
      lastRecord: claimed.lastRecord,
      stepUnread: claimed.stepUnread,
    };
  }

  drive(): Promise<void> {
    return upstreamContext.run(this.ctx, () => this.loop());
  }

  private async loop(): Promise<void> {
    const { deps, run } = this;
    const renew = this.renewLease();
    await deps.channels.watchControl(run.id).catch((err) => this.log.warn({ err }, 'subscribe failed'));
    try {
      await this.begin();
      while (!deps.stopping() || run.reason === null) {
        const known = await this.current();
        if (!known) return;
        if ((await this.before(known.state)) === 'stop') return;
        if ((await this.attempt(known)) === 'stop') return;
      }
    } catch (err) {
      if (!(err instanceof FencedOut))
        this.log.error(
          { err, iteration: this.ctx.iteration ?? null },
          'run crashed; the session is left for recovery',
        );
    } finally {
      clearInterval(renew);
      this.leaving = true;
      await this.end();
    }
  }

  /**
   * The run begins here: taken over by the sweep only once its lease could have lapsed. A run taken over (after a
   * crash, a hand-over) counts among its tenant's active runs whatever happened to its slot; a run started by a
   * route holds the slot the route took (the heartbeat holds it again, should an earlier run's end have given it
   * back after the start took it).
   */
  private async begin(): Promise<void> {
    const { deps, run, swept } = this;
    const tenant = swept && this.known ? this.known.state.tenant : null;
    const state = this.known?.state;
    // The spend of turns whose commit landed and whose record may not have (its process was killed between the two,
    // or the record failed): recorded now, oldest first, before this run bills anything, once (commit.ts
    // `recordOpenSpend`); what fails stays with the run, for its first record to send again.
    await Promise.all([
      deps.store.runs.keep(run, deps.leaseTtlMs, tenant),
      state && state.spendOpen.length > 0 ? recordOpenSpend(deps, run, state.tenant, state.spendOpen) : null,
    ]);
    // A takeover may send again a turn (or a compaction) the dead owner had started: the log marks it first.
    if (swept && state && state.status === 'running' && state.fence === run.fence)
      await markLostTurn(deps.store, run.id, state, 'takeover').catch((err: unknown) =>
        this.log.warn({ err }, 'the dropped turn could not be marked'),
      );
  }

  /** The session as known, or read again; null once it is not this run's to drive (left `running`, fenced). */
  private async current(): Promise<Known | null> {
    const held = this.known ?? (await this.reload());
    this.known = null;
    const known = held?.stepUnread ? await this.withStep(held) : held;
    if (!known || known.state.status !== 'running') return null;
    if (known.state.fence !== this.run.fence) {
      // Another replica took the run over (this one's lease lapsed): its end says so.
      this.run.abort('fenced');
      return null;
    }
    return known;
  }

  /**
   * The claim's session with its pending step, which the claim left out (acquire-run-4.lua): the session read again
   * (one HGETALL, not in a script), together with the history every step reads first, so the step costs the run no
   * round trip of its own. The session may have changed since the claim: the queue length and last record the claim
   * read hold only when its revision has not moved.
   */
  private async withStep(known: Known): Promise<Known | null> {
    const [state, history] = await Promise.all([
      this.deps.store.load(this.run.id),
      known.history ?? this.deps.store.history(this.run.id),
    ]);
    if (!state) return null;
    const same = state.revision === known.state.revision;
    return {
      state,
      history,
      queued: same ? known.queued : null,
      lastRecord: same ? known.lastRecord : undefined,
    };
  }

  private async reload(): Promise<Known | null> {
    const state = await this.deps.store.load(this.run.id);
    return state ? { state, history: null, queued: null, lastRecord: undefined } : null;
  }

  /** Before each step: the start is counted once; a cancel or an abort that ends the run ends it here. */
  private async before(state: SessionState): Promise<'stop' | 'go'> {
    const { deps, run } = this;
    run.tenant = state.tenant;
    if (!this.counted) {
      this.counted = true;
      this.ctx.tenant = state.tenant;
      this.log = this.log.child({ tenant: state.tenant });
      this.log.info(
        { iteration: state.iteration, model: state.params.model, fence: run.fence },
        'run started',
      );
    }
    if (state.control === 'cancel' || run.reason === 'cancel') {
      // The history stays valid; see cancelSession.
      await cancelOwnRun(deps, run, state);
      return 'stop';
    }
    if (run.reason === 'shutdown' || run.reason === 'fenced' || run.reason === 'deleted') return 'stop';
    run.rearm();
    return 'go';
  }

  /** One step, and what its failure means: go on (an interrupt, a cut stream, a commit that landed) or stop. */
  private async attempt(known: Known): Promise<'stop' | 'go'> {
    const { deps, run, log } = this;
    try {
      const next = await this.step(known);
      this.cutRetries = 0;
      if (next === 'again') return 'go';
      // A compaction asked for during the run's last turn is a run of its own (claimed once this one returned).
      if (await leftoverCompaction(deps, run.id)) deps.kick?.(run.id);
      return 'stop';
    } catch (err) {
      if (err instanceof FencedOut) return 'stop';
      if (isAbort(err, run)) {
        if (run.reason === 'interrupt') {
          await commitInterrupt(deps, run);
          return 'go';
        }
        // A cancel: the loop's top finishes it.
        return run.reason === 'cancel' ? 'go' : 'stop';
      }
      // A commit that the store turned out to have applied after all: go on from what it holds.
      if (err instanceof CommitLanded) return 'go';
      // The store stayed unreachable longer than a commit waits: leave the run for recovery (the session is
      // still `running` and due), rather than failing the session for a Redis outage.
      if (err instanceof StoreUnavailable) throw err;
      if (isStreamCut(err) && this.cutRetries < STREAM_CUT_RETRIES) {
        this.cutRetries++;
        upstreamStreamFailed(deps.metrics, log, this.ctx, err, this.cutRetries);
        // The cut turn's events still on their way (the relay's last batch, sent as live news) land first: the mark
        // reads the log's tail, and comes after them, as a commit would.
        await run.news.idle();
        // Live news only: a store that fails here fails the next step, not this mark.
        await deps.store
          .load(run.id)
          .then((s) => s && markLostTurn(deps.store, run.id, s, 'stream_cut'))
          .catch((e: unknown) => log.warn({ err: e }, 'the dropped turn could not be marked'));
        return 'go';
      }
      // A failure after the answer's headers (an error event, a broken body). An answer with a status, and a request
      // that got none (refused, timed out: APIConnectionError), failed before: the fetch counted and logged them.
      if (
        !(err instanceof APIError && err.status !== undefined) &&
        !(err instanceof APIConnectionError) &&
        upstreamFailureType(err) !== null
      )
        upstreamStreamFailed(deps.metrics, log, this.ctx, err, null);
      const error = upstreamError(err);
      // The session shows a generic message for an internal error: its cause is only here, in the log.
      if (error.code === 'internal_error') log.error({ err }, 'run failed with an internal error');
      await fail(deps, run, error, log, {
        iteration: this.ctx.iteration ?? null,
        model: this.ctx.model ?? null,
        upstream_request_id: err instanceof APIError ? (err.requestID ?? null) : null,
      });
      return 'stop';
    }
  }

  /** One step of a run: answer a pending tool step, or run the SDK's runner until it stops or needs a client. */
  private async step(known: Known): Promise<'done' | 'again'> {
    const { deps, run, log } = this;
    const { store } = deps;
    const { state } = known;
    const history = known.history ?? (await store.history(run.id));
    // A compaction asked for while the session was idle or failed: this run only compacts.
    if (state.compactRequest?.resume) return runCompactionOnly(deps, run, state, history, log);
    if (pendingToolCalls(history).length > 0) return toolStep(deps, run, state, history);

    const queued = known.queued ?? (await store.queueLength(run.id));
    const last = history.at(-1);
    // A turn to send, but the budget is spent: the run stops here (after the last turn's tool results).
    // A summary alone at the end hands the turn back to the model (it answers from it). So does a reply the API
    // paused (`pause_turn`, server-side `compaction`) whose continuation this run has to send: the run that got it
    // died before its next request, or stopped at `max_iterations`. Its iteration record says so (read by the claim,
    // or once here, only when the history ends with a reply).
    const paused =
      last?.role === 'assistant' && (isPausedReply(last) || (await this.pausedReply(known, history.length)));
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
    const budget = state.maxIterations - (state.iteration - state.runStart);
    // A model without a price under a dollar ceiling: the run fails before its request (no `continue` would go on),
    // its follow-ups left queued; a run that stops without a request (a budget, the cap, `max_iterations`) stops as
    // it would. The routes refuse to start such a run (400); this is the check of the runs the service starts itself
    // (an action deadline's, a sub-agent's answer), and of a ceiling that came after the run started (the tenant's
    // cap of a replica configured since).
    const unpriced = turnToSend && budget > 0 ? unpricedError(store.spend, state.params, state.budget) : null;
    if (unpriced) {
      await fail(deps, run, unpriced, log, { model: state.params.model });
      return 'done';
    }
    // A paused reply is resumed before follow-ups join the history: the API refuses a user turn after an assistant turn
    // whose server tool call has no result yet. The runner's reply merges them once the turn ends.
    if (queued > 0 && !paused) {
      // A compaction the runs before left (the policy after the last turn, a request the last run could not take) is
      // made first, over the history as they left it, as the SDK's runner compacts right after its final turn: the
      // follow-ups are the next turn's input, after the summary (the next step merges them), never summarized away.
      // Not with no turn left to send (`max_iterations`): the run stops after merging them, as it did.
      const due = budget > 0 ? await dueAtStart(store, state, history.length, last, known.lastRecord) : null;
      if (due) return runTurns(deps, run, state, history, budget, log, false, due);
      return this.commitFollowUps(known, history);
    }
    if (!turnToSend) {
      // Nothing to send: the run is over.
      await finish(deps, run, state, state.stopReason ?? 'end_turn');
      return 'done';
    }
    if (budget <= 0) {
      // Follow-ups stay queued after a paused reply (as when the budget stops it): its continuation comes first.
      await finish(deps, run, state, 'max_iterations', paused);
      return 'done';
    }
    return runTurns(deps, run, state, history, budget, log, paused);
  }

  /**
   * Follow-ups become a user turn: merged onto a trailing user turn, or a new one after an assistant turn. When the
   * commit's revision is the next one (nobody else wrote since the session was read), what it answers is all that
   * changed: the next step goes on from the history held here, extended with the turn it wrote.
   */
  private async commitFollowUps(known: Known, history: StoredMessage[]): Promise<'again'> {
    const { state } = known;
    const res = await commit(this.deps, this.run, {
      queue: history.at(-1)?.role === 'user' ? { into_last: true } : {},
    });
    if (res.revision === state.revision + 1 && res.mergedCount > 0) {
      extendHistory(history, res);
      const next = { ...state, revision: res.revision, control: res.control, msgCount: history.length };
      this.known = { state: next, history, queued: 0, lastRecord: known.lastRecord };
    }
    return 'again';
  }

  /**
   * Whether the history's last message (of `length`) is a model reply that stopped unfinished (`pause_turn`,
   * `compaction`): the API continues it. Its record tells, when it is that reply's: not after a `PUT …/messages` (a
   * replaced history's records tell nothing of it), and only for the reply at the history's end.
   */
  private async pausedReply(known: Known, length: number): Promise<boolean> {
    const { state } = known;
    if (recordCount(state) <= state.replacedAt) return false;
    const lastRecord =
      known.lastRecord !== undefined
        ? known.lastRecord
        : (await this.deps.store.iterationRecords(this.run.id, -1, -1))[0];
    return recordTellsPaused(lastRecord, state, length);
  }

  /**
   * Renews the run's lease (and its due time, and its tenant's slot) every third of the TTL; a lost lease aborts the
   * run as `fenced`.
   */
  private renewLease(): NodeJS.Timeout {
    const { deps, run, log } = this;
    const { store, leaseTtlMs, owner } = deps;
    return setInterval(
      () => {
        store.runs
          .heartbeat(run, owner, leaseTtlMs)
          .then((ok) => {
            // A renewal answered after this run wrote its end or let go of its lease finds it gone: no takeover.
            if (!ok && !this.leaving && !run.ended) run.abort('fenced');
          })
          .catch((err) => log.warn({ err }, 'lease renewal failed'));
      },
      Math.floor(leaseTtlMs / 3),
    );
  }

  /** The run's end, whatever ended it: the control channel left, the lease released. */
  private async end(): Promise<void> {
    const { deps, run } = this;
    // A delete dropped the turn in flight (or a reply whose tools ran): its tenant's day is charged for it here.
    await billDeleted(deps, run);
    await deps.channels.unwatchControl(run.id);
    // The turns whose records failed without a crash (RunHandle `spendUnrecorded`) are sent once more, best effort,
    // before the release drops the entries of `spend_open` through what was recorded: a run that ended normally
    // removed its due entry, so the runs' sweep never finds the rest; only the session's next claim would. Not for a
    // run stopped by a delete of its session: the session's ledger seq (`q:{<tenant>}:spent`) went with it, so a turn
    // whose record landed though its answer was lost would be counted a second time (its `spend_open` is gone too).
    if (run.reason !== 'deleted' && run.spendUnrecorded.length > 0)
      await recordOpenSpend(deps, run, run.tenant, run.spendUnrecorded);
    // Handed over (a shutdown): any replica may claim it now rather than after the lease TTL.
    // With it go the entries of the session's open spend at or below the seq this run recorded through
    // (`spendRecorded`), whoever holds the lease now; the later ones (records that failed) stay in `spend_open`.
    await deps.store.runs
      .release(run.id, deps.owner, run.fence, run.reason === 'shutdown', run.spendRecorded)
      .catch(() => {});
    // Last: nothing of this run writes after this line. `abort`: null when the run ended by itself (the session
    // left `running`), else why this process stopped it.
    if (this.counted)
      this.log.info(
        { abort: run.reason, iteration: this.ctx.iteration ?? null, ms: Date.now() - this.started },
        'run ended',
      );
  }
}
