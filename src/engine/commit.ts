/**
 * A run's writes to its session: a turn's commit (and the spend it carries), the run's end, a failure, an interrupt,
 * a cancel (the run's own, or a route's of a run no replica holds), and the tasks a dropped step leaves. Past 400
 * lines as one file: each is one guarded `apply` (the run's fence, or the revision a route read), and they share the
 * ops that end a run (`endOps`) and the billing of what a turn spent, so the guards and the once-only billing are
 * read in one place.
 */
import { randomBytes } from 'node:crypto';
import { FencedOut, InvalidStatus, NotFound, RevisionMismatch, StoreUnavailable } from '../errors.js';
import { toolCallsOf, type StoredMessage } from '../history.js';
import { withoutOpenCalls } from '../tools/server-blocks.js';
import {
  outstandingTasks,
  pendingFields,
  resultField,
  resultsTurn,
  type PendingCall,
  type PendingStep,
} from '../store/pending.js';
import type { SessionStore } from '../store/store.js';
import { deadlineFields, spendOfIncr, type SessionError, type SessionState } from '../store/session-state.js';
import type { ApplyOps, ApplyResult } from '../store/apply-ops.js';
import { interruptedResult } from './policy.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { statusEvent } from './status.js';
import { eventAtRevision, eventOf } from '../events/schemas.js';
import { taskCallId } from '../tenant-tools/task-record.js';
import type { TaskQueue } from '../tenant-tools/tasks.js';
import {
  OpenSpendNotRecorded,
  SPEND_OPEN_MAX,
  openSpendDay,
  openSpendTail,
  type OpenSpend,
} from '../cost/spend.js';

/** A commit whose answer was lost was applied after all (see `applyThroughOutage`). */
export class CommitLanded extends Error {
  constructor(
    readonly sessionId: string,
    /**
     * The session's open spend as read once the commit was found applied, oldest first (its own last, if it billed a
     * turn).
     */
    readonly spendOpen: OpenSpend[] = [],
  ) {
    super(`a commit of session ${sessionId} was applied though its answer was lost`);
    this.name = 'CommitLanded';
  }
}

/** How a run ends: the status, and what comes with it. */
export interface RunEnd {
  status: 'requires_action' | 'failed' | 'idle';
  pending?: PendingStep | null;
  error?: SessionError | null;
  stopReason?: string | null;
  /** `requires_action`: the session's `action_timeout_s`, the deadline of the new action (null: none). */
  actionTimeoutS?: number | null;
  /**
   * With `actionTimeoutS`: Redis's now (the store's `clock.now()`), which the new deadline counts from (`endRun`
   * sets it).
   */
  now?: number;
  /**
   * The step's calls whose tool tasks are out (queued while the client is asked: tool-step.ts; a failed run's
   * step): their results may be delivered before this commit lands, so it leaves their fields as stored
   * (`pendingFields`).
   */
  tasksOut?: readonly PendingCall[];
}

/**
 * Ops that end a run in `next.status`: every status field written (absent ones cleared), the control request
 * cleared, the lease released, and the `session.status` event announcing it.
 */
export function endOps(next: RunEnd): ApplyOps {
  const { now, ...st } = { pending: null, error: null, stopReason: null, ...next };
  // A new action's deadline, or none (src/sessions/deadlines.ts).
  const timeoutS = st.status === 'requires_action' ? (st.actionTimeoutS ?? null) : null;
  if (timeoutS && now === undefined) throw new Error("an action's deadline needs Redis's now");
  const deadline = deadlineFields(timeoutS, now ?? 0);
  return {
    hset: {
      ...deadline,
      status: st.status,
      ...pendingFields(st.pending, st.tasksOut),
      error: st.error ? JSON.stringify(st.error) : '',
      stop_reason: st.stopReason ?? '',
      control: '',
    },
    release_lease: true,
    events: [['session.status', statusEvent({ ...st, actionDue: Number(deadline['act_due']) || null })]],
  };
}

/** Ops that make the session `idle` with `stopReason`, releasing the lease. */
export const idleOps = (stopReason: string): ApplyOps => endOps({ status: 'idle', stopReason });

/**
 * The `iteration.persisted` event of a record: `iteration` (model turns completed with it), `n` (its record number,
 * `GET …/iterations/:n`), `kind` for a compaction; the revision is stamped by the script.
 */
export function persistedEvent(iteration: number, n: number, kind?: 'compaction') {
  return eventAtRevision('iteration.persisted', { iteration, n, ...(kind ? { kind } : {}), revision: null });
}

/** `a` then `b` as one commit: lists concatenated in that order, fields of `b` over those of `a`. */
export function mergeOps(a: ApplyOps, b: ApplyOps): ApplyOps {
  const out: ApplyOps = { ...a, ...b };
  if (a.push_msgs || b.push_msgs) out.push_msgs = [...(a.push_msgs ?? []), ...(b.push_msgs ?? [])];
  if (a.push_iters || b.push_iters) out.push_iters = [...(a.push_iters ?? []), ...(b.push_iters ?? [])];
  if (a.lset_msgs || b.lset_msgs) out.lset_msgs = [...(a.lset_msgs ?? []), ...(b.lset_msgs ?? [])];
  if (a.lset_iters || b.lset_iters) out.lset_iters = [...(a.lset_iters ?? []), ...(b.lset_iters ?? [])];
  if (a.events || b.events) out.events = [...(a.events ?? []), ...(b.events ?? [])];
  if (a.queue_push || b.queue_push) out.queue_push = [...(a.queue_push ?? []), ...(b.queue_push ?? [])];
  if (a.hset || b.hset) out.hset = { ...a.hset, ...b.hset };
  if (a.hincr || b.hincr) out.hincr = { ...a.hincr, ...b.hincr };
  return out;
}

/** `tool.completed` events for the calls with a result that were not announced yet; marks them announced. */
export function completedEvents(
  calls: PendingCall[],
  durations: ReadonlyMap<string, number>,
): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const c of calls) {
    if (!c.result || c.reported) continue;
    c.reported = true;
    out.push(
      eventOf('tool.completed', {
        tool_use_id: c.id,
        name: c.name,
        input: c.input,
        content: c.result.content,
        is_error: c.result.is_error,
        duration_ms: durations.get(c.id) ?? null,
      }),
    );
  }
  return out;
}

/**
 * A fenced commit: only the current owner of the run writes; the result tells of a cancel asked meanwhile. A commit
 * that bills a turn marks it open in the session (`spend_open`, src/cost/spend.ts OpenSpend: its seq is the commit's
 * revision) and then adds it to the tenant's day (`billed`): a process killed between the two leaves the mark for
 * the claim of the run's takeover, or the runs' sweep, to record, once (record-2.lua counts a seq once); a record
 * that failed without a crash leaves it too, and the run sends it again with its next turn (`recordSpend`), or at
 * its end (src/engine/run.ts `end`), else the session's next claim does.
 */
export async function commit(
  deps: RunDeps,
  run: RunHandle,
  given: ApplyOps,
  /**
   * Writes that follow the commit's answer, sent alongside its record rather than after it: a run's end (`endRun`,
   * `finish`, `endUnlessMerged`) gives back its tenant's run slot there, so a client that saw the session leave
   * `running` and starts another run of the tenant at once finds the slot free one round trip sooner (the record is
   * another hash tag's command, as the slot's; neither needs the other).
   */
  alongside?: (res: ApplyResult) => Promise<void> | null,
): Promise<ApplyResult> {
  const ops = withSpendOpen(deps, run, withUnbilled(run, given));
  let res: ApplyResult;
  try {
    res = await run.obs.commit(() => applyThroughOutage(deps, run, ops));
  } catch (err) {
    // The session left `running` under us (cancelled or deleted by a route): this run is over. A session gone
    // (deleted) keeps no usage, but the turns this commit billed were spent all the same: its tenant's day gets them
    // (unmarked: no commit landed to mark them, nor a session left to find the mark; at most once).
    if (err instanceof NotFound) await billed(deps, run, ops);
    if (err instanceof InvalidStatus || err instanceof NotFound) {
      throw new FencedOut(run.id);
    }
    // Applied after all: its usage is in the session, its mark too (read with the marker); the tenant's day gets it
    // here, as after any commit.
    if (err instanceof CommitLanded) {
      run.unbilled = null;
      if (ops.spend_open && err.spendOpen.length > 0)
        await recordOpenSpend(deps, run, run.tenant, err.spendOpen);
    }
    throw err;
  }
  if (res.control === 'cancel' && !run.reason) run.abort('cancel');
  await bothSettled(billed(deps, run, ops, res.revision), alongside?.(res) ?? null);
  return res;
}

/**
 * Awaits both, then rejects with the first failure, if any: a run that goes on after one failed (to its `end`)
 * finds the other done — the record's `spendRecorded` set before its release reads it.
 */
async function bothSettled(a: Promise<void> | null, b: Promise<void> | null): Promise<void> {
  for (const r of await Promise.allSettled([a, b])) if (r.status === 'rejected') throw r.reason;
}

/**
 * `commit`'s `alongside` for a commit that ends the run unless it merged follow-ups (the run then goes on with them,
 * holding its slot): the run's end (src/store/runs.ts `end`).
 */
export function endUnlessMerged(
  deps: Pick<RunDeps, 'store'>,
  run: RunHandle,
  tenant: string,
): (res: ApplyResult) => Promise<void> | null {
  return (res) => (res.mergedCount === 0 ? deps.store.runs.end(run, tenant) : null);
}

/**
 * `ops` with its turn's spend marked open (`spend_open`), when it bills one, and the seq through which the run
 * recorded the session's spend (`spend_recorded`): the session's `spend_open` drops the turns at or below it and keeps
 * the later ones (those whose record failed), so every seq committed stays there until a record through it succeeded.
 */
function withSpendOpen(
  deps: Pick<RunDeps, 'store'>,
  run: Pick<RunHandle, 'spendRecorded'>,
  ops: ApplyOps,
): ApplyOps {
  const spend = spendOfIncr(ops.hincr);
  if (!spend) return ops;
  const marked: ApplyOps = { ...ops, spend_open: openSpendTail(spend, deps.store.clock.now()) };
  if (run.spendRecorded !== null) marked.spend_recorded = run.spendRecorded;
  return marked;
}

/**
 * Records a session's open spend (`open`, oldest first: the `spend_open` a claim found or a commit found applied
 * read, or the turns the run could not record and its new one) in its tenant's day, once (record-2.lua counts a seq
 * of a session at most once); the run's end then drops the entries through the seq recorded (`spendRecorded`). Best
 * effort, as every record: the turns a failure (without a crash) left unrecorded stay in the session's `spend_open`,
 * and in `spendUnrecorded`, which the run's next record sends first, and its end once more before its release
 * (src/engine/run.ts `end`; not after a delete); still failing then, they wait in `spend_open` for the session's next
 * claim (the runs' sweep does not find a run that ended: it removed its due entry).
 */
export async function recordOpenSpend(
  deps: Pick<RunDeps, 'store'>,
  run: Pick<RunHandle, 'id' | 'spendRecorded' | 'spendUnrecorded'>,
  tenant: string | null,
  open: readonly OpenSpend[],
): Promise<void> {
  let recorded: number | null = null;
  if (tenant !== null)
    recorded = await deps.store.spend.recordOpen(tenant, run.id, open).catch((err: unknown) =>
      // Through the seq the failure let pass (a later day's turns failed): those before are in their day.
      err instanceof OpenSpendNotRecorded ? err.recorded : null,
    );
  if (recorded !== null && (run.spendRecorded === null || recorded > run.spendRecorded))
    run.spendRecorded = recorded;
  const through = run.spendRecorded;
  // As the session's field: the newest SPEND_OPEN_MAX (apply-8.lua drops the older ones).
  run.spendUnrecorded = open.filter((o) => through === null || o.seq > through).slice(-SPEND_OPEN_MAX);
}

/** `ops` with the run's unbilled usage added to its counters (RunHandle `unbilled`). */
function withUnbilled(run: RunHandle, ops: ApplyOps): ApplyOps {
  if (!run.unbilled) return ops;
  const hincr = { ...ops.hincr };
  for (const [k, n] of Object.entries(run.unbilled)) hincr[k] = (hincr[k] ?? 0) + n;
  return { ...ops, hincr };
}

/**
 * After a commit of `ops` landed (at revision `seq`, which marked its spend open: `withSpendOpen`): what it billed is
 * no longer unbilled, and goes into the tenant's day. Without `seq` (no commit landed), unmarked.
 */
async function billed(deps: RunDeps, run: RunHandle, ops: ApplyOps, seq?: number): Promise<void> {
  run.unbilled = null;
  await recordSpend(deps, run, ops, seq);
}

/**
 * A run stopped by a delete of its session (`run.reason` `deleted`): what it billed and had not committed yet
 * (RunHandle `unbilled`: a turn cut short by the delete, a reply whose idempotent tools were running) goes into its
 * tenant's day all the same. The session's usage went with the session, but a DELETE must not take a turn's dollars
 * out of TENANT_MAX_COST_USD_PER_DAY (spec §7.4). Once: `billed` clears `unbilled`, and a commit that found the
 * session gone billed it already (`commit`).
 */
export async function billDeleted(deps: RunDeps, run: RunHandle): Promise<void> {
  if (run.reason === 'deleted' && run.unbilled) await billed(deps, run, { hincr: run.unbilled });
}

/**
 * Adds a committed turn's usage and cost to its tenant's day: another hash tag than the session's, so a command of
 * its own after the commit. A crash between the two leaves the turn's mark (`spend_open`) in the session, which the
 * run's takeover (its claim) or the runs' sweep records; the record counts the turn's seq once (record-2.lua). A
 * record that failed without a crash left its turns in `spend_open` and in the run's `spendUnrecorded`: they go
 * first, in the same record-2.lua call as this turn (usually none: the normal path is one call of one turn).
 * Unmarked (no commit landed, `seq` undefined: the session is gone): added once, best effort.
 */
async function recordSpend(deps: RunDeps, run: RunHandle, ops: ApplyOps, seq?: number): Promise<void> {
  const spend = spendOfIncr(ops.hincr);
  if (!spend) return;
  if (seq === undefined || ops.spend_open === undefined) {
    if (run.tenant !== null) await deps.store.spend.record(run.tenant, spend).catch(() => {});
    return;
  }
  const turn: OpenSpend = { seq, day: openSpendDay(ops.spend_open), incr: spend };
  await recordOpenSpend(deps, run, run.tenant, [...run.spendUnrecorded, turn]);
}

/** The spend metrics of a turn of `model` whose usage counters are `hincr` (usageIncr's). */
export function countSpend(
  deps: RunDeps,
  tenant: string,
  model: string,
  hincr: Record<string, number>,
): void {
  const s = spendOfIncr(hincr);
  if (!s) return;
  deps.metrics.spend(deps.store.spend.prices.family(model), tenant, {
    input: s.in,
    output: s.out,
    cache_write: s.cw,
    cache_read: s.cr,
    costMicros: s.nc ? null : s.cost,
  });
}

/**
 * `apply`, riding out a short store outage (a Redis restart or failover): while the store is unreachable the commit
 * is tried again for at most the lease TTL, so a turn's reply or a tool step's results are kept, not redone. Each
 * commit writes a marker (`last_commit`); an attempt whose answer was lost may have been applied, so it is sent
 * again only once the marker shows it was not — a commit never applies twice. If it was applied, `CommitLanded`
 * makes the run start over from what the store holds. The fencing token still refuses a late commit.
 */
async function applyThroughOutage(deps: RunDeps, run: RunHandle, ops: ApplyOps): Promise<ApplyResult> {
  const { store } = deps;
  // The run's live news first (live-news.ts): the commit's events come after them in the log.
  await run.news.idle();
  const marker = `${run.fence}:${randomBytes(6).toString('hex')}`;
  const marked: ApplyOps = { ...ops, hset: { ...ops.hset, last_commit: marker } };
  const deadline = Date.now() + deps.leaseTtlMs;
  for (;;) {
    try {
      return await store.apply(run.id, { fence: run.fence, status: ['running'] }, marked);
    } catch (err) {
      if (!(err instanceof StoreUnavailable)) throw err;
      for (;;) {
        if (Date.now() > deadline || run.reason) throw err;
        await new Promise((resolve) => setTimeout(resolve, 200));
        try {
          const last = await store.lastCommit(run.id);
          if (last.marker === marker) throw new CommitLanded(run.id, last.spendOpen);
          run.obs.commitRetried();
          break; // not applied: send it again
        } catch (e) {
          if (!(e instanceof StoreUnavailable)) throw e;
        }
      }
    }
  }
}

/**
 * Ends the run in `next.status` (`requires_action`, `failed` or `idle`), releasing the lease in the same commit
 * and announcing the status; `events` go before the `session.status` event, `extra` ops join the commit.
 */
export async function endRun(
  deps: RunDeps,
  run: RunHandle,
  next: RunEnd,
  events: Array<[string, string]> = [],
  extra: ApplyOps = {},
): Promise<void> {
  const end = endOps({ now: deps.store.clock.now(), ...next });
  await commit(deps, run, mergeOps(extra, { ...end, events: [...events, ...(end.events ?? [])] }), () =>
    deps.store.runs.end(run, run.tenant ?? undefined),
  );
}

/** Idle with `stop_reason`, releasing the lease, unless follow-ups are queued (then the loop merges them). */
export async function finish(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  stopReason: string,
  /** The history ends with a paused reply: queued follow-ups stay queued (its continuation comes first). */
  paused = false,
): Promise<void> {
  if (paused) {
    await commit(deps, run, idleOps(stopReason), () => deps.store.runs.end(run, state.tenant));
    return;
  }
  const intoLast = state.msgCount > 0 && (await deps.store.lastMessage(run.id))?.role === 'user';
  await commit(
    deps,
    run,
    { queue: { none: idleOps(stopReason), ...(intoLast ? { into_last: true } : {}) } },
    endUnlessMerged(deps, run, state.tenant),
  );
}

/**
 * Where queued follow-ups go when a run stops or is interrupted (the ops' `queue`): onto a trailing user turn, or as a
 * new one after a reply. After a paused reply (`pause_turn`: a server tool call without its result, which the API
 * refuses any turn after) they stay queued: the next run resumes that turn before they join (run.ts `step`).
 */
export function followUpsAfter(last: StoredMessage | undefined): Pick<ApplyOps, 'queue'> {
  if (last?.role === 'user') return { queue: { into_last: true } };
  return last && isPausedReply(last) ? {} : { queue: {} };
}

/** A reply the API paused with a server tool call open (no result yet): no turn may follow it but its continuation. */
export const isPausedReply = (m: StoredMessage): boolean =>
  m.role === 'assistant' && Array.isArray(m.content) && withoutOpenCalls(m.content) !== m.content;

/**
 * An interrupt aborted the model request in flight: its partial reply is dropped, the follow-ups join the last user
 * turn, and the thread's anchor ends here: the next turn creates a new thread (thread-anchor.ts). The aborted request
 * continued that anchor, and the API may still hold it in flight, or have stored its reply: a continue of the same
 * anchor would be refused (`thread_continue_in_flight`, `thread_already_continued`) and replayed by the SDK, one
 * refused request per interrupt. (An interrupt of a tool step of a stored reply does not come here: the step answers
 * its calls and commits them with the follow-ups, and the thread goes on from that reply.)
 */
export async function commitInterrupt(deps: RunDeps, run: RunHandle): Promise<void> {
  const [last, state] = await Promise.all([deps.store.lastMessage(run.id), deps.store.load(run.id)]);
  await commit(deps, run, {
    hset: { control: '', thread: '' },
    events: [eventOf('turn.dropped', { iteration: (state?.iteration ?? 0) + 1, reason: 'interrupt' })],
    ...followUpsAfter(last ?? undefined),
  });
}

/** The run failed: the session becomes `failed` with `error` (a failed tool step keeps its pending calls). */
export async function fail(
  deps: RunDeps,
  run: RunHandle,
  error: SessionError,
  log: EngineLogger,
  /** What the line also says: the failed turn's iteration, model and upstream request id, when a turn failed. */
  about: Record<string, unknown> = {},
): Promise<void> {
  log.warn(
    { error_code: error.code, error_message: error.message, retryable: error.retryable, ...about },
    'run failed',
  );
  run.obs.failed(error.code);
  try {
    const state = await deps.store.load(run.id);
    const pending = state?.pending ?? null;
    // A failed tool step keeps its pending calls, so `resume` runs the failed step again. A result delivered for a
    // call whose task is out, after the read above, is left as stored.
    const tasksOut = pending ? outstandingTasks(pending) : [];
    await endRun(deps, run, { status: 'failed', pending, error, tasksOut }, [
      eventOf('session.error', error),
    ]);
  } catch (err) {
    if (!(err instanceof FencedOut)) throw err;
  }
}

/**
 * Ends a running session as cancelled with a valid history: unanswered calls get an `is_error` "cancelled" result,
 * follow-ups already queued are kept as the last user turn, status `idle`, stop_reason `cancelled`. Used by the
 * owner of the run (`fence`), or by the cancel route when no live process owns it (`rev`: the revision `state` was
 * read at; guarded by status too).
 *
 * Either way the write is guarded by the result fields of the calls it answers as cancelled (empty, as `state` has
 * them): a result delivered since `state` was read (a tool task's, written by whichever replica took it, with no
 * lease: src/tenant-tools/service.ts; a client's, a deadline's) was answered 200 and announced (`tool.completed`),
 * and must not be replaced by the cancelled text. Such a write is refused (`RevisionMismatch`): the caller reads the
 * session again and cancels from that read, which keeps the result. Each refusal means one more call has its result,
 * so a cancel is refused at most once per call of the step.
 *
 * Never refused at TENANT_MAX_BYTES (`storageCap: false`; its bytes are counted): a cancel is how a tenant at its limit
 * stops a run that spends and writes, whoever commits it (the owner, the cancel route, a deadline, the agents' sweep).
 * What it adds is bounded by the step: a status event and an `is_error` result per call.
 */
export async function cancelSession(
  store: SessionStore,
  state: SessionState,
  guard: { fence: number } | { rev: number },
  /**
   * Usage counters the change bills too (a run's `unbilled`), their mark (`spend_open`) and the seq the run recorded
   * through (`spend_recorded`): `withSpendOpen`.
   */
  bill?: Pick<ApplyOps, 'hincr' | 'spend_open' | 'spend_recorded'>,
): Promise<ApplyResult> {
  const last = await store.lastMessage(state.id);
  const calls = last ? toolCallsOf(last) : [];
  const ops = idleOps('cancelled');
  // A cancel drops a compaction asked for and not done yet.
  ops.hset = { ...ops.hset, compact: '' };
  const unanswered: Record<string, string> = {};
  if (calls.length > 0) {
    const byId = new Map((state.pending?.calls ?? []).map((c) => [c.id, c]));
    const step: Array<Pick<PendingCall, 'id' | 'result' | 'resultStored'>> = calls.map(
      (c) => byId.get(c.id) ?? { id: c.id },
    );
    for (const c of step) if (!c.result) unanswered[resultField(c.id)] = '';
    ops.queue = {
      results: resultsTurn(step, () => interruptedResult('cancelled before this tool call completed')),
    };
  } else {
    Object.assign(ops, followUpsAfter(last ?? undefined));
  }
  if (bill?.hincr) ops.hincr = { ...ops.hincr, ...bill.hincr };
  if (bill?.spend_open) ops.spend_open = bill.spend_open;
  if (bill?.spend_recorded !== undefined) ops.spend_recorded = bill.spend_recorded;
  return store.apply(
    state.id,
    {
      ...guard,
      status: 'fence' in guard ? ['running'] : ['running', 'requires_action'],
      fields: unanswered,
    },
    ops,
    state.tenant,
    { storageCap: false },
  );
}

/**
 * The run's own cancel (its loop's top): `cancelSession` under its fence, billing what the run has unbilled, and the
 * run's end; the step's tool tasks still out (queued while the step waited for the client) leave the queue
 * (`dropStepTasks`). A result delivered since `state` was read (`cancelSession` is refused) is kept: the cancel is
 * made again from the session as it is now, whose tasks are the ones dropped.
 */
export async function cancelOwnRun(deps: RunDeps, run: RunHandle, state: SessionState): Promise<void> {
  const bill = run.unbilled ? withSpendOpen(deps, run, { hincr: run.unbilled }) : undefined;
  let s = state;
  let seq: number | undefined;
  for (;;) {
    try {
      seq = (await cancelSession(deps.store, s, { fence: run.fence }, bill)).revision;
      break;
    } catch (err) {
      if (!(err instanceof RevisionMismatch)) throw err;
      // Ends: each refusal is one more call with its result, and a result is never taken away while the run holds
      // its fence (only `resume` of a failed session clears one).
      const now = await deps.store.load(run.id);
      if (!now) throw new FencedOut(run.id);
      s = now;
    }
  }
  // The run's end alongside the bill (as `commit`'s `alongside`): the slot is free once the cancel shows.
  await bothSettled(bill ? billed(deps, run, bill, seq) : null, deps.store.runs.end(run, s.tenant));
  await dropStepTasks(deps.tasks, s);
}

/**
 * The tool tasks of `s`'s pending step (as read before a write that dropped or replaced it) still out leave the
 * queue (sessions/control.ts `dropTasks`, which says why). Best effort.
 */
export async function dropStepTasks(
  tasks: Pick<TaskQueue, 'settle'> | undefined,
  s: SessionState,
): Promise<void> {
  if (!tasks || !s.pending) return;
  await Promise.all(
    outstandingTasks(s.pending).map((c) =>
      tasks.settle(s.tenant, taskCallId(s.id, c.id, c.round ?? 0), 'cancelled').catch(() => {}),
    ),
  );
}
