/**
 * The routes' controls of a session's run: PATCH, retry, cancel, resume and delete, each a guarded read-modify-write
 * through `mutate` (src/sessions/mutate.ts). Past 400 lines: they share the checks a change of params, tools or
 * status must pass (cache breakpoints, prices, compaction, sub-agents) and the cancel's task and child clean-up.
 */
import type { z } from 'zod';
import { assertBudgetLeft } from '../engine/budget.js';
import { assertFixedMarks } from '../engine/cache-breakpoints.js';
import { cancelSession, dropStepTasks } from '../engine/commit.js';
import { InvalidRequest, InvalidStatus, RevisionMismatch, conflict } from '../errors.js';
import { isAgentTool, type patchSessionBody, type retryBody } from '../schemas.js';
import { childSessionId } from '../agents/waiting.js';
import { childrenAtWork } from '../agents/dropped.js';
import { checkCompactionParams, checkEditWithPending } from './compact.js';
import { assertAgentsPriced } from './agents-priced.js';
import { checkActionTimeout, checkToolChoice } from './create.js';
import { clearResult } from '../store/pending.js';
import { isOutOfMemory } from '../store/unavailable.js';
import { deadlineFields, encodeFields, recordCount, type SessionState } from '../store/session-state.js';
import {
  CAS_ATTEMPTS,
  checkIfMatch,
  mergeParams,
  mutate,
  runOps,
  statusOps,
  type MutationResult,
  type SessionDeps,
} from './mutate.js';
import { toolsPatch } from './tools-patch.js';
import { withoutSecrets } from './secrets.js';
import { eventOf } from '../events/schemas.js';

/** Changes params and policies; a run in flight takes them at its next turn boundary. */
export function patchSession(
  deps: SessionDeps,
  tenant: string,
  id: string,
  body: z.infer<typeof patchSessionBody>,
  ifMatch?: number,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    const next: Partial<SessionState> = {};
    if (body.params) next.params = mergeParams(s.params, body.params);
    if (body.max_iterations !== undefined) next.maxIterations = body.max_iterations;
    if (body.approval !== undefined) next.approval = body.approval;
    if (body.review_tool_results !== undefined) next.review = body.review_tool_results;
    if (body.on_tool_error !== undefined) next.onToolError = body.on_tool_error;
    if (body.on_max_tokens !== undefined) next.onMaxTokens = body.on_max_tokens;
    if (body.cache_tool_results !== undefined) next.cacheToolResults = body.cache_tool_results;
    if (body.stream !== undefined) next.stream = body.stream;
    // A budget below what is already spent is accepted: the run stops at its next turn boundary (see budget.ts).
    if (body.budget !== undefined) next.budget = body.budget;
    if (body.run_tools_eagerly !== undefined) next.runToolsEagerly = body.run_tools_eagerly;
    if (body.pause_after_turn !== undefined) next.pauseAfterTurn = body.pause_after_turn;
    if (body.compaction !== undefined) next.compaction = body.compaction;
    checkCompactionParams(next.params ?? s.params, 'compaction' in next ? next.compaction : s.compaction);
    // Nor with a compaction asked for and not made yet (`compaction_pending`): every run would try it and fail.
    if (body.params) checkEditWithPending(next.params ?? s.params, s.compactRequest);
    // A dollar ceiling (the budget's, the tenant's cap) needs the model's price (400 `unknown_model_price`).
    if (body.params || body.budget !== undefined)
      deps.store.spend.assertPriced(
        next.params ?? s.params,
        ('budget' in next ? next.budget : s.budget)?.cost_usd,
      );
    // Nor can it count turns already run without a price (a model changed since): their dollars are unknown.
    const unpriced = s.cost.unpriced + s.childUsage.unpriced;
    if (body.budget?.cost_usd !== undefined && unpriced > 0)
      throw new InvalidRequest(
        'unknown_model_price',
        `${unpriced} turn(s) of this session (or its sub-agents) ran on a model without a price, so a \`budget.cost_usd\` cannot count them; give \`budget.total_tokens\` instead.`,
        { unpriced_turns: unpriced },
      );
    if (body.metadata !== undefined) next.metadata = body.metadata;
    // From the next action on; the one waiting now keeps its deadline.
    if (body.action_timeout_s !== undefined)
      next.actionTimeoutS = checkActionTimeout(deps, body.action_timeout_s);
    if (body.on_action_timeout !== undefined) next.onActionTimeout = body.on_action_timeout;
    if (body.ttl_s !== undefined) {
      next.ttlS = body.ttl_s;
      // The sweep finds it at the new time (an entry may be early, never late: src/store/due.ts), of Redis's clock.
      if (body.ttl_s) await deps.store.expiryDue.addIn(id, body.ttl_s * 1000);
    }
    const toolsEvent: Array<[string, string]> = [];
    if (body.tools !== undefined) {
      const t = await toolsPatch(deps, s, body.tools);
      Object.assign(next, t.next);
      toolsEvent.push(t.event);
    }
    if (body.params || body.tools !== undefined)
      assertFixedMarks(next.params ?? s.params, next.tools ?? s.tools);
    if (body.budget !== undefined || body.tools !== undefined)
      assertAgentsPriced(deps, next.tools ?? s.tools, ('budget' in next ? next.budget : s.budget)?.cost_usd);
    // The params and tools after the change, together: new tools with the old `tool_choice`, and the other way round.
    if (body.params || body.tools !== undefined)
      await checkToolChoice(
        deps,
        {
          tenant: s.tenant,
          session: s.id,
          tools: next.tools ?? s.tools,
          tenantTools: next.tenantTools ?? s.tenantTools,
        },
        next.params ?? s.params,
      );
    const paramsEvent: Array<[string, string]> = body.params
      ? [eventOf('params.updated', { params: withoutSecrets(body.params) })]
      : [];
    return {
      ops: {
        hset: encodeFields(next),
        hincr: { params_rev: 1 },
        events: [...paramsEvent, ...toolsEvent, eventOf('session.updated', withoutSecrets(body))],
      },
      after: async () => {
        await deps.store.publishControl(id, 'params');
        if (body.metadata !== undefined) await reindexMetadata(deps, s, body.metadata);
      },
    };
  });
}

/** Drops the last reply (and what followed it) and sends that turn again, optionally with changed params. */
export function retryTurn(
  deps: SessionDeps,
  tenant: string,
  id: string,
  body: z.infer<typeof retryBody>,
  ifMatch?: number,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    if (s.status === 'running')
      throw conflict('session_running', 'A turn is in progress; cancel it first or wait.');
    // Before anything is dropped: with the budget spent, the turn would not be sent again, and the reply (with its
    // tool results) would be lost for nothing.
    assertBudgetLeft(s);
    // The last record, n = turns + compactions (entry n - 1 of the list).
    const last = recordCount(s);
    const records = last > 0 ? await deps.store.iterationRecords(id, last - 1, last - 1) : [];
    const rec = records[0];
    if (!rec) throw conflict('nothing_to_retry', 'The session has no reply to retry.');
    // A replaced history holds no reply of the records before it.
    if (last <= s.replacedAt) {
      throw conflict(
        'nothing_to_retry',
        'The history was replaced since the last reply; there is no reply to retry.',
      );
    }
    // A compaction is no reply; a reply before the last compaction is no longer in the history.
    if (rec.kind === 'compaction' || rec.reply_index < s.msgBase) {
      throw conflict('nothing_to_retry', 'The last iteration is a compaction, not a reply to send again.');
    }
    const params = body?.params ? mergeParams(s.params, body.params) : s.params;
    // As a PATCH: the policy's compaction and a compaction edit exclude each other; at most 4 cache breakpoints
    // before the history's. (The model's price under a dollar ceiling: `mutate`, with `params` below.)
    if (body?.params) {
      checkCompactionParams(params, s.compaction);
      checkEditWithPending(params, s.compactRequest);
      assertFixedMarks(params, s.tools);
    }
    if (body?.params)
      await checkToolChoice(
        deps,
        { tenant: s.tenant, session: s.id, tools: s.tools, tenantTools: s.tenantTools },
        params,
      );
    const run = runOps(
      { ...s, status: 'idle' },
      { pending: null, params, iteration: s.iteration - 1, runStart: s.iteration - 1 },
    );
    const paramsEvent: Array<[string, string]> = body?.params
      ? [eventOf('params.updated', { params: withoutSecrets(body.params) })]
      : [];
    return {
      ops: {
        ...run,
        trim_msgs: rec.reply_index - s.msgBase,
        trim_iters: last - 1,
        hincr: { params_rev: 1 },
        events: [
          eventOf('turn.dropped', { iteration: rec.iteration, reason: 'retry' }),
          ...paramsEvent,
          ...(run.events ?? []),
        ],
      },
      starts: true,
      params,
      // The dropped reply's sub-agents at work are cancelled (by the agents' sweep); what they spent stays counted
      // in `usage.children`, as the dropped turn's own tokens stay in `usage`.
      drops: await childrenAtWork(deps.store, s),
      // The dropped reply's tasks (queued while its step waited for the client) are the session's no longer.
      after: () => dropTasks(deps, s),
    };
  });
}

const wasCancelled = (s: SessionState): boolean => s.status === 'idle' && s.stopReason === 'cancelled';

/**
 * Commits the cancel of `s` (running with no live owner, or waiting for its client) and drops its step's tool tasks
 * once it did: a session that ended otherwise meanwhile (`InvalidStatus`: it failed, or finished) keeps them, as a
 * failed one's `resume` still waits for them. The write is guarded by the revision `s` was read at: a session changed
 * since (a tool task's result delivered, a client's answer) is refused with `RevisionMismatch`, and `cancelRun` works
 * the cancel out again from a new read, so a result answered 200 meanwhile stays in the history.
 */
async function cancelHere(deps: SessionDeps, s: SessionState): Promise<void> {
  try {
    await cancelSession(deps.store, s, { rev: s.revision });
    await deps.store.runs.end(s.id, s.tenant);
  } catch (err) {
    if (!(err instanceof InvalidStatus)) throw err;
    return;
  }
  await dropTasks(deps, s);
}

/**
 * Cancels the run. With no live owner (or while waiting for a client) the cancel is committed here; otherwise the
 * owner is asked (control field + message) and this waits a bounded time for it to commit the cancel. A cancel
 * committed here that finds the session changed since its read (`cancelHere`) starts again from a new read, a few
 * times at most, as `mutate` does (a client that pinned a revision with If-Match gets 412 instead); once the owner
 * was asked, in the wait for it (`cancelOnce`), so that one cancel writes one request.
 */
export async function cancelRun(
  deps: SessionDeps,
  tenant: string,
  id: string,
  ifMatch?: number,
): Promise<MutationResult> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await cancelOnce(deps, tenant, id, ifMatch);
    } catch (err) {
      if (!(err instanceof RevisionMismatch) || ifMatch !== undefined || attempt >= CAS_ATTEMPTS) throw err;
    }
  }
}

async function cancelOnce(
  deps: SessionDeps,
  tenant: string,
  id: string,
  ifMatch: number | undefined,
): Promise<MutationResult> {
  const { store } = deps;
  const s = await store.loadFor(tenant, id);
  checkIfMatch(s, ifMatch);
  if (s.status === 'idle' || s.status === 'failed') {
    throw conflict('session_not_running', `The session is ${s.status}; there is nothing to cancel.`);
  }
  if (s.status === 'requires_action' || !(await store.runs.leaseHolder(id))) {
    // A run parked for its tool tasks holds no lease: it is cancelled here, and its tasks leave the queue.
    await cancelHere(deps, s);
    return { state: await store.loadFor(tenant, id), queued: false };
  }
  try {
    await store.apply(
      id,
      { status: ['running'] },
      { hset: { control: 'cancel' }, events: [['session.cancel_requested', '{}']] },
      tenant,
      // A cancel is never refused at TENANT_MAX_BYTES (counted): it stops a run's spending and writing.
      { storageCap: false },
    );
  } catch (err) {
    // The run ended between the read above and this write: answered as if the cancel had come after it.
    if (!(err instanceof InvalidStatus)) throw err;
    if (err.status === 'requires_action') {
      await cancelHere(deps, await store.loadFor(tenant, id));
      return { state: await store.loadFor(tenant, id), queued: false };
    }
    throw conflict('session_not_running', `The session is ${err.status}; there is nothing to cancel.`);
  }
  await store.publishControl(id, 'cancel');
  // The owner aborts the turn and commits the cancel; wait a bounded time so most callers see the result. The
  // step's tasks still out (queued while it waited for the client) leave the queue with it: the owner drops those
  // of the step it cancels (cancelOwnRun); those of the step read here are dropped once the cancel is seen, so they
  // are gone when it is answered (and after the cancel committed here, of the step it cancelled). Only a cancel
  // that took place drops them: a run that failed meanwhile keeps them for `resume`.
  for (let i = 0; i < 100; i++) {
    const cur = await store.loadFor(tenant, id);
    try {
      if (cur.status === 'requires_action') {
        // The owner ended the run waiting for its client before it saw the request (its end clears `control`): the
        // cancel is committed here, as for a session found waiting.
        await cancelHere(deps, cur);
        return { state: await store.loadFor(tenant, id), queued: false };
      }
      if (cur.status !== 'running') {
        if (wasCancelled(cur)) await dropTasks(deps, s);
        return { state: cur, queued: false };
      }
      if (i > 20 && !(await store.runs.leaseHolder(id))) await cancelHere(deps, cur);
      else if (cur.control !== 'cancel') await askAgain(deps, tenant, id);
    } catch (err) {
      // The session changed under a commit here (a client's answer started a run, a task's result landed): worked
      // out again from the next read, in this loop. Thrown to `cancelRun`, the cancel started over and, finding a
      // run at work, wrote its request a second time (two `session.cancel_requested` for one cancel).
      if (!(err instanceof RevisionMismatch)) throw err;
    }
    await new Promise((r) => setTimeout(r, 30));
  }
  return { state: await store.loadFor(tenant, id), queued: true };
}

/**
 * Asks the run of a session again to cancel, once the request this cancel made was cleared without a cancel: the run
 * asked ended waiting for its client and an answer started another (which a cancel that read the session then would
 * have asked). The request's event was written once, with the first ask; this sets `control` and signals the owner.
 */
async function askAgain(deps: SessionDeps, tenant: string, id: string): Promise<void> {
  try {
    await deps.store.apply(id, { status: ['running'] }, { hset: { control: 'cancel' } }, tenant, {
      storageCap: false,
    });
  } catch (err) {
    // Ended meanwhile: the next read says how.
    if (err instanceof InvalidStatus) return;
    throw err;
  }
  await deps.store.publishControl(id, 'cancel');
}

/**
 * The tool tasks of `s`'s pending step (as read before a write that dropped or replaced it: cancel, delete, retry,
 * a replaced history, a deadline that failed the session) still out (queued, leased) leave the queue, so they stop
 * counting in TOOL_TASKS_MAX_PER_TENANT at once — else only when a worker next claims that tool, or at the call's
 * `timeout_ms`. A worker holding one is told `task_cancelled` at its next heartbeat or result (the session no longer
 * awaits it: src/tenant-tools/service.ts `awaits`). One whose result was taken (done, not delivered yet) is left to
 * its delivery, under way, which answers its worker (settle-9.lua says why). Best effort: a call missed here is
 * dropped at its claim, as before.
 */
export async function dropTasks(deps: SessionDeps, s: SessionState): Promise<void> {
  await dropStepTasks(deps.tasks, s);
}

/** Runs a failed session again from where it failed (a failed tool step's failed server calls run anew). */
export function resumeRun(
  deps: SessionDeps,
  tenant: string,
  id: string,
  ifMatch?: number,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    if (s.status !== 'failed')
      throw conflict('session_not_failed', `The session is ${s.status}; only a failed session resumes.`);
    if (s.pending?.turn) {
      // A reply under review when the session failed (its deadline with `on_action_timeout: "fail"`): its calls were
      // never reviewed, so the step is the review, and it is brought back (`review_turn`, a new deadline from the
      // policy now) rather than run. No run starts: `continue`, `PUT …/messages`, `retry` or a message go on from it.
      const deadline = deadlineFields(s.actionTimeoutS, deps.store.clock.now());
      const due = Number(deadline['act_due']) || null;
      const st = statusOps(
        { ...s, action: { ...s.action, due } },
        { status: 'requires_action', error: null, stopReason: null, control: '' },
      );
      return { ops: { ...st, hset: { ...st.hset, ...deadline } }, starts: false };
    }
    let pending = s.pending;
    if (pending) {
      // The failed step runs again: failed server results are dropped so those calls run anew.
      pending = structuredClone(pending);
      for (const c of pending.calls) {
        if (c.kind === 'server' && c.result?.is_error && c.approval !== 'denied') {
          clearResult(c);
          delete c.reported;
          c.started = false;
          // A tenant tool's call runs anew as a task of its own.
          if (c.runner) c.round = (c.round ?? 0) + 1;
        }
      }
    }
    return { ops: runOps(s, { pending, runStart: s.runStart }), starts: true };
  });
}

/**
 * The metadata index follows a PATCH of `metadata` (src/store/metadata-index.ts): the pairs that left are dropped,
 * then those of the session as it is now are added (concurrent PATCHes converge on the last one's).
 */
async function reindexMetadata(deps: SessionDeps, s: SessionState, after: Record<string, unknown>) {
  const { store } = deps;
  await store.index.metadata.replace(
    s.tenant,
    store.index.member(s.createdAt, s.id),
    s.metadata,
    after,
    async () => {
      const now = await store.load(s.id);
      return now && now.tenant === s.tenant ? now.metadata : null;
    },
  );
}

/** Deletes the session; a run in flight is told to stop. */
/**
 * `s` with the usage of its sub-agents still at work added to its counters first (theirs in turn, deepest first,
 * each once per child: child-usage-1.lua), so a delete that takes `s` does not take their spend from its ancestors.
 * The sweep deletes them after `s`, when their parent is gone and nothing more can be added to it.
 */
async function withLiveChildren(deps: SessionDeps, s: SessionState): Promise<SessionState> {
  const agents = new Set(s.tools.filter(isAgentTool).map((t) => t.name));
  const calls = (s.pending?.calls ?? []).filter(
    (c) => c.kind === 'client' && !c.result && agents.has(c.name),
  );
  if (calls.length === 0) return s;
  for (const c of calls) {
    const child = await deps.store.load(childSessionId(s.id, c.id));
    if (child) await deps.store.addChildUsage(s.id, await withLiveChildren(deps, child));
  }
  return (await deps.store.load(s.id)) ?? s;
}

export async function removeSession(
  deps: SessionDeps,
  tenant: string,
  id: string,
  ifMatch?: number,
): Promise<void> {
  const s = await deps.store.loadFor(tenant, id);
  checkIfMatch(s, ifMatch);
  // A sub-agent deleted before it ended: what it spent counts toward its parent all the same, its own sub-agents'
  // at work included (once per child; a turn still streaming is lost with it).
  if (s.parent) await deps.store.addChildUsage(s.parent.session_id, await withLiveChildren(deps, s));
  if (s.status === 'running') await deps.store.publishControl(id, 'delete');
  await deps.store.destroy(id, tenant, s.createdAt, { metadata: s.metadata });
  // Its parent, parked on its call, is answered "deleted" by the agents' sweep: now, not at its next look (a full
  // Redis refuses the ZADD: then at that look; the delete itself stands).
  if (s.parent)
    await deps.store.runs.trees.wake(s.parent.session_id, tenant).catch((err: unknown) => {
      if (!isOutOfMemory(err)) throw err;
    });
  await dropTasks(deps, s);
}
