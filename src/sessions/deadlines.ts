/**
 * Deadlines of pending actions (§7.4, policy `action_timeout_s` / `on_action_timeout`). Whatever a `requires_action`
 * session waits for (approvals, client results, a review; any action another feature adds: it only has to write
 * `deadlineFields` with its status, as the engine's `endOps` does) has its deadline in the meta fields `act_due` /
 * `act_warn` and an entry in the due set `actions:due` (src/store/due.ts), written before the session write. Any
 * replica sweeps the set; each step is one `apply` guarded by the revision it read, by `requires_action` and by the
 * warning still untold (`act_warn` as read), so `action.expiring` (at 80 %) and `action.timed_out` are written once
 * whatever the number of replicas and restarts; a timeout whose warning was never told (the sweep first saw it past
 * its deadline) tells it first, in its own write. The warning moves no revision (nothing a client sees changes but
 * the event), so an answer with the If-Match read at `requires_action` is taken until the deadline. A decision
 * racing the deadline either lands first (the sweep then finds nothing to time out) or is refused with 409
 * `action_timed_out` — never both. On time out, `deny` (default) answers what the action asked for and
 * nothing else: it denies pending approvals (reason `timed out`), or answers missing client results `Error: no result
 * within N s` (is_error), or accepts results under review as they stand, and the run goes on (after approvals, to
 * ask for the step's client results, with their own deadline); `fail` fails the session with `action_timed_out`.
 *
 * Past 400 lines as one file: the deadline's fields, the sweep that reads them and the writes it makes (warn, deny,
 * fail) share one set of guards (revision, status, `act_warn` as read); split, the exactly-once reasoning above
 * would be spread over files that each hold only part of it.
 */
import { InvalidStatus, QuotaExceeded, RevisionMismatch, conflict, isRefusal } from '../errors.js';
import { requiredAction } from '../engine/status.js';
import type { EngineLogger } from '../engine/run-handle.js';
import type { DueEntry } from '../store/due.js';
import { encodeResult, outstandingTasks, setResult, type PendingStep } from '../store/pending.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { childUsageIncr, type SessionState } from '../store/session-state.js';
import { SERVICE_ACTORS } from '../store/client-tokens.js';
import { runOps, SPAWN_DUE_DELAY_MS, startRun, statusOps, type SessionDeps } from './mutate.js';
import { SweepLoop } from '../sweep-loop.js';
import { eventOf } from '../events/schemas.js';
import { isAgentTool } from '../schemas.js';
import { childSessionId } from '../agents/waiting.js';
import { cancelRun, dropTasks } from './control.js';
import { FailureLog } from '../log.js';

const ACTION_TIMED_OUT = 'action_timed_out';

/** A timeout whose run a tenant quota refuses is tried again this much later. */
const QUOTA_RETRY_MS = 5_000;

/** Entries a pass reads at a time. */
const SWEEP_BATCH = 100;

/**
 * Most entries one pass takes: it goes on reading while entries are due, so a burst (hundreds of sessions waiting
 * with the same timeout) is warned and timed out within about one interval, not `SWEEP_BATCH` an interval; past
 * this the rest wait for the next pass, so a pass (and the Redis load it makes) stays bounded whatever the backlog.
 */
const SWEEP_PASS_MAX = 2_000;

/** Entries of a batch handled at once (each a few round trips to Redis): bounds the writes in flight of a pass. */
const SWEEP_CONCURRENCY = 16;

/**
 * Cleared deadline fields, the action marked as timed out (a late decision gets 409 `action_timed_out`), and what
 * timed out (`act_timed_out`: its deadline, and `ids`, the calls the timeout answered for good). A step can time out
 * more than once (its approvals, then the client results it waits for after them, then their review): the timeouts
 * before this one that answered calls the step still holds stay in `earlier`, so a late answer to any of those calls
 * is still refused after the last one. Calls no longer in the step (a later step's timeout) drop out.
 */
function firedFields(s: SessionState, ids: readonly string[] = []): Record<string, string> {
  const inStep = new Set(s.pending?.calls.map((c) => c.id) ?? []);
  const prev = s.action.timedOut;
  const earlier = (prev ? [{ due: prev.due, ids: prev.ids }, ...prev.earlier] : [])
    .map((a) => ({ due: a.due, ids: a.ids.filter((i) => inStep.has(i)) }))
    .filter((a) => a.ids.length > 0);
  return {
    act_due: '',
    act_warn: '',
    act_fired: '1',
    act_timed_out: JSON.stringify({ due: s.action.due, ids, ...(earlier.length ? { earlier } : {}) }),
  };
}

const timedOutError = (due: number | null | undefined, more: Record<string, unknown> = {}) =>
  conflict(ACTION_TIMED_OUT, 'The action this answers timed out (policy `action_timeout_s`).', {
    expires_at: due ? new Date(due).toISOString() : null,
    ...more,
  });

/**
 * 409 `action_timed_out` for a decision, result or `continue` that comes at or after the deadline of the action
 * it answers (even before a sweep fired it), or after the action timed out. `now` is Redis's clock (the store's
 * `clock.now()`), the one the deadline was written in and the sweep fires it by: with the answering replica's own,
 * one ahead refused answers to actions still open (and the sweep kept them waiting).
 */
export function assertActionOpen(s: SessionState, now: number, toolUseIds?: readonly string[]): void {
  const late = s.status === 'requires_action' && s.action.due !== null && now >= s.action.due;
  const fired = s.status !== 'requires_action' && s.action.fired;
  if (!late && !fired) return;
  // An answer naming calls (`toolUseIds`) none of which the timed-out action answers is not late: a client's result
  // given early beside approvals (the approvals' timeout leaves it open: it is asked for next), before or after the
  // sweep fired. Not after a `fail` timeout: the session failed, and every call of its step with it.
  if (toolUseIds && !(fired && s.status === 'failed')) {
    const timedOut = late ? askedNow(s) : answeredByTimeouts(s);
    if (!toolUseIds.some((id) => timedOut.has(id))) return;
  }
  throw timedOutError(s.action.due ?? s.action.timedOut?.due);
}

/** The calls the action waiting now names: its `tool_calls`, and under review the results it may replace. */
function askedNow(s: SessionState): Set<string> {
  const action = requiredAction(s.status, s.pending);
  return new Set([
    ...(action?.tool_calls.map((c) => c.id) ?? []),
    ...(action?.type === 'review_tool_results' ? action.tool_results.map((r) => r.tool_use_id) : []),
  ]);
}

/** The calls the step's `deny` timeouts answered (`act_timed_out`). */
function answeredByTimeouts(s: SessionState): Set<string> {
  const t = s.action.timedOut;
  return new Set(t ? [t, ...t.earlier].flatMap((a) => a.ids) : []);
}

/**
 * 409 `action_timed_out` for a decision or result naming a call whose action timed out and that the timeout answered
 * (`deny`), unless the session asks for that call again now (a history replaced to end before its answer). Asked
 * means named by the action waiting now (its `tool_calls`, or under review the results it may replace), not merely
 * held by the step: after its approvals timed out a step waits for its client results, and still holds the denied
 * calls.
 */
export function assertCallsOpen(s: SessionState, toolUseIds: readonly string[]): void {
  const timedOut = s.action.timedOut;
  if (!timedOut) return;
  const asked = askedNow(s);
  for (const a of [timedOut, ...timedOut.earlier]) {
    const id = toolUseIds.find((i) => a.ids.includes(i) && !asked.has(i));
    if (id !== undefined) throw timedOutError(a.due, { tool_use_id: id });
  }
}

/**
 * The timeout the waiting action's deadline was set with: a PATCH of `action_timeout_s` applies from the next action
 * on, so the policy now may differ (or be null). A deadline written before `act_s` was kept: the policy.
 */
const actionTimeout = (s: SessionState): number | null => s.action.timeoutS ?? s.actionTimeoutS;

/** What `action.expiring` and `action.timed_out` tell. */
function actionData(s: SessionState, extra: Record<string, unknown> = {}): string {
  const action = requiredAction(s.status, s.pending, s.action.due);
  return JSON.stringify({
    type: action?.type ?? null,
    tool_use_ids: action?.tool_calls.map((c) => c.id) ?? [],
    expires_at: action?.expires_at ?? null,
    action_timeout_s: actionTimeout(s),
    ...extra,
  });
}

/**
 * The ops that time the action out as the session's `on_action_timeout` says; `starts`: the run goes on. `answered`:
 * the calls the timeout answered (`deny`), or null when it ended the step (`fail`: every call still open is over).
 */
function timeoutOps(s: SessionState): { ops: ApplyOps; starts: boolean; answered: string[] | null } {
  const n = actionTimeout(s) ?? Math.round(((s.action.due ?? 0) - s.updatedAt) / 1000);
  const timedOut: [string, string] = [
    'action.timed_out',
    actionData(s, { on_action_timeout: s.onActionTimeout }),
  ];
  if (s.onActionTimeout === 'fail' || !s.pending) {
    const error = { code: ACTION_TIMED_OUT, message: `No answer within ${n} s.`, retryable: false };
    // Tool tasks out for the step are cancelled after this write (`dropTasks`, below), and their calls move to their
    // next round with it (`tasksRenewed`).
    const renewed = s.pending ? tasksRenewed(s.pending) : null;
    const st = statusOps(s, { status: 'failed', error, ...(renewed ? { pending: renewed } : {}) });
    return {
      ops: {
        ...st,
        hset: { ...st.hset, ...firedFields(s) },
        events: [timedOut, eventOf('session.error', error), ...(st.events ?? [])],
      },
      starts: false,
      answered: null,
    };
  }
  // A new kind of action (a tool task, …) says here what its timeout does; without a pending step it
  // fails (above) unless its feature adds its case.
  const { turn, ...rest } = s.pending;
  if (turn) {
    // A reply under review (`review_turn`): accepted as it stands, as `continue` does.
    const next = rest.calls.length
      ? { pending: rest }
      : { pending: null, stopReason: turn.stop_reason ?? 'end_turn' };
    const st = runOps(s, next);
    return {
      // Its calls go on to their approvals: asked again, not answered.
      ops: {
        ...st,
        hset: { ...st.hset, ...firedFields(s) },
        events: [timedOut, ...(st.events ?? [])],
      },
      starts: true,
      answered: [],
    };
  }
  // Only what the action asked for is answered, as the client would have: approvals come first (§2.2), so an
  // `approve_tool_calls` timeout denies them and leaves the step's client calls (a client tool's, a sub-agent's
  // whose child works) unanswered. The run then goes on as after the client's own last denial (`decide`): it runs
  // the step's server calls (the denied ones answered by their denial), queues the tasks of its tenant tools' calls
  // not denied, and asks for the client results (`submit_tool_results`) with a deadline of their own, counted from
  // then (tool-step.ts, `endRun`). Answering them here would time out a wait that never started.
  const action = requiredAction(s.status, s.pending);
  const asked = new Set(action?.tool_calls.map((c) => c.id) ?? []);
  const reviewing = action?.type === 'review_tool_results';
  const step = structuredClone(s.pending);
  const events: Array<[string, string]> = [timedOut];
  const answered: string[] = [];
  for (const c of step.calls) {
    if (!asked.has(c.id)) continue;
    if (c.approval === 'required') {
      answered.push(c.id);
      c.approval = 'denied';
      c.reason = 'timed out';
      events.push(
        eventOf('tool_call.decided', {
          tool_use_id: c.id,
          decision: 'deny',
          reason: 'timed out',
          by: SERVICE_ACTORS.deadline,
        }),
      );
    } else if (c.kind === 'client' && !c.result) {
      answered.push(c.id);
      const result = { content: `Error: no result within ${n} s`, is_error: true };
      events.push(['tool_result.submitted', encodeResult(c.id, setResult(c, result)).event]);
    }
  }
  // Results under review are accepted as they stand (as `continue` does).
  if (reviewing) step.review = true;
  const st = runOps(s, { pending: step });
  return {
    ops: {
      ...st,
      hset: { ...st.hset, ...firedFields(s, answered) },
      events: [...events, ...(st.events ?? [])],
    },
    starts: true,
    answered,
  };
}

/**
 * The step of a session failed by its deadline, when tool tasks were out for it (queued while the client was asked:
 * src/engine/tool-step.ts): each such call moves to its next round in the failing write, so a run of the step again
 * (`resume`, a message, then the client's answer) queues it as a task of its own, whenever the drop of the old round
 * (`dropTasks`, after the write) lands. Kept at its round, the call's task would be `known` to a run that got there
 * before the drop, which parks on it, and the drop then cancels the task it waits for. A SIGKILL between the write and
 * the drop leaves the old round out until a claim (or its deadline) finds the session waiting for another round.
 * Null: no task was out (a reviewed turn's calls were never queued).
 */
function tasksRenewed(pending: PendingStep): PendingStep | null {
  if (pending.turn) return null;
  const step = structuredClone(pending);
  const out = outstandingTasks(step);
  for (const c of out) c.round = (c.round ?? 0) + 1;
  return out.length > 0 ? step : null;
}

/**
 * The sub-agents working on agent calls a timeout answers (`answered`; null: every call of the step still open, which
 * `fail` ends): no child's result will answer its call now, so the usage each spent so far joins the parent's
 * (`u_child_*`) in the timeout's own write, once per child (`count_once` under `cb:<child id>`, the mark the agents' sweep counts an ended child under:
 * src/store/lua/child-usage-1.lua; whichever write comes first counts it), and they are cancelled after it. What a
 * child spends between the two is not counted. A child that ended already is left to the sweep, which counts it whole.
 */
async function childrenCut(
  deps: SessionDeps,
  s: SessionState,
  answered: readonly string[] | null,
): Promise<{ ids: string[]; working: string[]; counts: Array<[string, Record<string, number>]> }> {
  const agents = new Set(s.tools.filter(isAgentTool).map((t) => t.name));
  // An agent call an approval timeout leaves open (approved already, its child at work) is not cut: the session
  // waits for it next, with its own deadline.
  const ids = (s.pending?.calls ?? [])
    .filter((c) => c.kind === 'client' && !c.result && agents.has(c.name))
    .filter((c) => answered === null || answered.includes(c.id))
    .map((c) => childSessionId(s.id, c.id));
  const counts: Array<[string, Record<string, number>]> = [];
  const working: string[] = [];
  for (const id of ids) {
    const child = await deps.store.load(id);
    if (!child || child.status === 'idle' || child.status === 'failed') continue;
    working.push(id);
    counts.push([`cb:${id}`, childUsageIncr(child)]);
  }
  return { ids, working, counts };
}

/** Runs `fn` on each item, at most `limit` at once; resolves when all have. `fn` must not reject. */
async function inParallel<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** Sweeps `actions:due` on a timer: every replica runs one; their writes are guarded, so any number may. */
export class DeadlineSweeper {
  private readonly loop: SweepLoop;

  constructor(
    private readonly deps: SessionDeps,
    private readonly log: EngineLogger,
    intervalMs: number,
  ) {
    this.loop = new SweepLoop(() => this.sweep(), intervalMs, new FailureLog(log, 'the deadline sweep'));
  }

  start(): void {
    this.loop.start();
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /**
   * One pass: the entries due by Redis's now, each deadline compared with it (due-read-1.lua), not with this
   * replica's clock: one running ahead timed out every session's action early. A deadline is the one stored
   * (`act_due`, the `expires_at` shown), so an action times out when Redis's clock reaches what the API showed.
   * The now read sets this process's reckoning of Redis's clock (`store.clock`), which deadlines are written and
   * answers checked with.
   *
   * The pass reads batches until none is due (or it took SWEEP_PASS_MAX), earliest due first: that order is the
   * fairness between sessions and tenants (no entry waits behind one due after it; a tenant's burst delays another's
   * entries due at the same time by its share of a pass, handled SWEEP_CONCURRENCY at once). An entry is taken once
   * a pass: one left due (its writes lost 3 races, or failed) is read again by the next pass, not in a loop by this
   * one; so is one whose warning this pass told, should its deadline come while the pass goes on.
   */
  async sweep(): Promise<void> {
    const seen = new Set<string>();
    while (seen.size < SWEEP_PASS_MAX && !this.loop.stopping) {
      const { now, entries, all } = await this.due(SWEEP_BATCH + seen.size);
      const fresh = entries.filter((e) => !seen.has(e.id)).slice(0, SWEEP_PASS_MAX - seen.size);
      for (const e of fresh) seen.add(e.id);
      await inParallel(fresh, SWEEP_CONCURRENCY, (e) =>
        this.one(e, now).catch((err: unknown) =>
          this.log.warn({ err, session: e.id }, 'action deadline failed'),
        ),
      );
      if (all || fresh.length === 0) return;
    }
  }

  /**
   * Up to `limit` entries due by Redis's now, that now (observed by `store.clock`), and whether they are all the
   * entries due. A failed read fails the pass: the loop logs it once per outage.
   */
  private async due(limit: number): Promise<{ now: number; entries: DueEntry[]; all: boolean }> {
    const { store } = this.deps;
    const sent = Date.now();
    const { now, entries } = await store.actionsDue.dueNow(limit);
    store.clock.observe(now, sent);
    return { now, entries, all: entries.length < limit };
  }

  /** An entry: warned, timed out, moved to its true time, or dropped (the session no longer waits). */
  private async one(e: DueEntry, now: number): Promise<void> {
    const { store } = this.deps;
    for (let attempt = 0; attempt < 3; attempt++) {
      const s = await store.load(e.id);
      const due = s?.status === 'requires_action' ? s.action.due : null;
      if (!s || due === null) {
        await store.actionsDue.settle(e, null);
        return;
      }
      const warnAt = s.action.warnAt;
      if (now < due && (warnAt === null || now < warnAt)) {
        await store.actionsDue.settle(e, warnAt ?? due);
        return;
      }
      // The warning not told yet (`act_warn` set) guards each write below as read: the write that tells it clears
      // it, so it is told once. The revision alone would not do: the warning's own write does not move it.
      const guard = {
        rev: s.revision,
        status: ['requires_action' as const],
        ...(warnAt === null ? {} : { fields: { act_warn: String(warnAt) } }),
      };
      const expiring: [string, string] = ['action.expiring', actionData(s)];
      try {
        if (now < due) {
          // Nothing a client sees changes but the event (the action, its `expires_at`): the revision, `updated_at`
          // and so the ETag stay, and an answer sent with the If-Match read at `requires_action` is still taken.
          await store.apply(
            s.id,
            guard,
            { hset: { act_warn: '' }, events: [expiring], keep_revision: true },
            s.tenant,
            { storageCap: false },
          );
          await store.actionsDue.settle(e, due);
          return;
        }
        const { ops, starts, answered } = timeoutOps(s);
        // First seen past its deadline with the warning untold (every replica down across the 80 % mark, Redis
        // stalled, a backlog): the warning is told first, in the timeout's write.
        if (warnAt !== null) ops.events = [expiring, ...(ops.events ?? [])];
        const children = s.pending?.turn ? null : await childrenCut(this.deps, s, answered);
        if (children?.counts.length) ops.count_once = children.counts;
        // Due for the agents' sweep before the write, whose look cancels a child its parent no longer waits for:
        // should this process die before the cancels below, any replica's sweep makes them (mutate.ts `Plan.drops`).
        for (const id of children?.working ?? [])
          await store.runs.trees.soon(id, s.tenant, SPAWN_DUE_DELAY_MS);
        // Over the tenant's daily cap the deadline still answers the calls: the run it starts writes their results
        // and stops before its model request (`tenant_budget_exhausted`), as any run over the cap does; a run of a
        // model without a price under a dollar ceiling fails there (`unknown_model_price`: the engine checks).
        // Nor is it refused at TENANT_MAX_BYTES: a deadline fires whatever the tenant stores.
        await store.apply(s.id, guard, ops, s.tenant, { costCap: false, storageCap: false });
        // A sub-agent moved on by its deadline: its parent (parked on it) learns of a failure without a run's end,
        // and its ancestors that the child no longer waits for a client (its run, if one starts, may be long), from
        // the agents' sweep now (or at the next look, if the wake-up cannot be written: the timeout stands, and its
        // children are cancelled).
        await store.runs.trees
          .wake(s.id, s.tenant)
          .catch((err: unknown) => this.log.warn({ err, session: s.id }, 'sub-agent tree not woken'));
        this.log.info({ session: s.id, tenant: s.tenant }, 'action timed out');
        await store.actionsDue.settle(e, null);
        // A failed session no longer waits for its step's tool tasks (`fail`; with `deny` the run goes on and
        // awaits them): they leave the queue, and a worker holding one is told `task_cancelled`.
        if (!starts) await dropTasks(this.deps, s);
        for (const id of children?.ids ?? [])
          await cancelRun(this.deps, s.tenant, id).catch((err: unknown) => {
            if (!isRefusal(err)) throw err;
          });
        if (starts) await startRun(this.deps, s.id);
        return;
      } catch (err) {
        // Another write came first (a decision, another replica's sweep): read again.
        if (err instanceof RevisionMismatch || err instanceof InvalidStatus) continue;
        // The run the timeout resumes is over a tenant quota (active runs, the daily cost cap): tried again later.
        if (err instanceof QuotaExceeded) {
          await store.actionsDue.settle(e, now + QUOTA_RETRY_MS);
          return;
        }
        throw err;
      }
    }
  }
}
