/**
 * `PUT /v1/sessions/:id/messages`: the whole history replaced (the runner's `setMessagesParams`), on a session that is
 * not running and waits for no client but a review (`idle`, `failed`, reviewing a turn or tool results). The history is checked as create checks one; the session's
 * message thread is dropped (the next run creates one), and so is a failed step's pending state.
 */
import { assertActionOpen } from './deadlines.js';
import { assertBudgetLeft } from '../engine/budget.js';
import { requiredAction } from '../engine/status.js';
import { Conflict, InvalidRequest, conflict } from '../errors.js';
import { checkHistory, type StoredMessage } from '../history.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { recordCount, type SessionState } from '../store/session-state.js';
import { normalize } from './create.js';
import { dropTasks } from './control.js';
import { childrenAtWork } from '../agents/dropped.js';
import { toolsAfterChanges, toolsBeforeChanges } from './history-tools.js';
import { asDeclared, declaredTools } from './removed-tools.js';
import type { ToolRef } from '../store/session-state.js';
import { mutate, runOps, statusOps, type MutationResult, type Plan, type SessionDeps } from './mutate.js';
import { eventOf } from '../events/schemas.js';

export function replaceMessages(
  deps: SessionDeps,
  tenant: string,
  id: string,
  given: StoredMessage[],
  ifMatch?: number,
): Promise<MutationResult> {
  const messages = given.map(normalize);
  const problems = checkHistory(messages);
  if (problems.length) {
    throw new InvalidRequest(
      'invalid_history',
      `The messages break the Messages API's rules: ${problems[0]!.message}.`,
      problems,
    );
  }
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    // Reviewing: a turn (`pause_after_turn`) or tool results (`review_tool_results`): what the session holds for
    // review (the reply, the results) is dropped with the rest unless the new history has it.
    const action = requiredAction(s.status, s.pending)?.type;
    const reviewing = action === 'review_turn' || action === 'review_tool_results';
    // Taking over a review answers it, as `continue` does: after its deadline, refused as `continue` is.
    if (reviewing) assertActionOpen(s, deps.store.clock.now());
    if (s.status !== 'idle' && s.status !== 'failed' && !reviewing) {
      throw new Conflict(
        'session_not_replaceable',
        `The session is ${s.status}; its history can be replaced only while idle, failed or reviewing a turn or tool results.`,
        { status: s.status },
      );
    }
    const current = s.msgCount;
    const kept = Math.min(current, messages.length);
    const encoded = messages.map((m) => JSON.stringify(m));
    const status = statusOps(s, { status: 'idle', pending: null, error: null, stopReason: s.stopReason });
    const known = toolsKnownAfter(deps, s, messages);
    const ops: ApplyOps = {
      ...status,
      // The list keeps its first `kept` entries, rewritten in place; the rest are pushed (a history is never empty).
      ...(kept > 0 && kept < current ? { trim_msgs: kept } : {}),
      ...(kept > 0 ? { lset_msgs: encoded.slice(0, kept).map((m, i): [number, string] => [i, m]) } : {}),
      ...(messages.length > kept ? { push_msgs: encoded.slice(kept) } : {}),
      // `replaced_base`: `<replaced_at>:<msg_base>`, the whole-record index the new history starts at, named by the
      // PUT it belongs to; the kept segments below it are the replaced history's, which a chat page does not show
      // before it (src/chat/record.ts). One field, so a PUT by an older version (which sets `replaced_at` alone)
      // leaves a base that no longer matches, and the page does not trust it.
      hset: {
        ...status.hset,
        thread: '',
        replaced_at: String(recordCount(s)),
        replaced_base: `${recordCount(s)}:${s.msgBase}`,
        ...(known ? { tools_base: JSON.stringify(known.base), tools_sent: JSON.stringify(known.sent) } : {}),
      },
      events: [
        eventOf('messages.replaced', { message_count: messages.length }),
        ...(s.status !== 'idle' ? (status.events ?? []) : []),
      ],
    };
    return {
      guard: { rev: s.revision, status: [s.status] },
      ops,
      // A failed step's sub-agents its look has not cancelled yet (none under review: their results are in).
      drops: await childrenAtWork(deps.store, s),
      after: async () => {
        // A sub-agent that was reviewing is idle now without a run's end: its parent learns of it from the sweep now.
        if (s.status !== 'idle') await deps.store.runs.trees.wake(s.id, s.tenant);
        // The dropped step's tasks still out, if any (a failed step's), leave the queue.
        await dropTasks(deps, s);
      },
    };
  });
}

/**
 * What the model knows of the tools at the end of a new history (the runner's tool overrides outlive
 * `setMessagesParams`): what every request of the session sends as `tools` (`tools_base`; `tools` for a session
 * whose tools never changed) with the new history's own tool changes applied. The next run tells the model the
 * change from there to `tools` (src/engine/tools-change.ts), as it tells a PATCH: a tool removed before, whose
 * removal the new history does not hold, is removed again instead of offered. Null for a session whose tools never
 * changed given a history that changes none.
 */
function toolsKnownAfter(
  deps: SessionDeps,
  s: SessionState,
  history: readonly StoredMessage[],
): { base: ToolRef[]; sent: ToolRef[] } | null {
  const base = s.toolsBase ?? s.tools;
  const after = toolsAfterChanges(base, history, declaredTools(s));
  if (!after && s.toolsSent === null) return null;
  return { base, sent: after ? asDeclared(deps, s, after, history) : base };
}

/**
 * The session's newest answer made again (the chat's `regenerate-message`): the history cut back to its first
 * `pick(history, s)` messages (ending with the user turn the answer followed), the records of the turns cut dropped
 * with them, the message thread too (the history was rewritten), and a run started on what is left, in one write
 * (the revision guards it; `pick` answers from the history as read for it). Only on an idle or failed session: a
 * waiting step's sub-agents and tasks are the client's to answer or cancel first (409 `session_not_replaceable`);
 * not while a turn runs (409 `session_running`), nor with the budget spent. A compaction in the cut answer: 409
 * `nothing_to_retry` (the turn before it is no longer whole in the history).
 */
export function rerunFrom(
  deps: SessionDeps,
  tenant: string,
  id: string,
  pick: (history: StoredMessage[], s: SessionState) => number,
  /** What the request's Idempotency-Key records with the change, once `pick` answered (mutate.ts `Plan.applied`). */
  applied?: () => NonNullable<Plan['applied']>,
  ifMatch?: number,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    if (s.status === 'running')
      throw conflict('session_running', 'A turn is in progress; cancel it first or wait.');
    if (s.status !== 'idle' && s.status !== 'failed')
      throw conflict(
        'session_not_replaceable',
        `The session is ${s.status}: answer what it waits for, or cancel it, before an answer is made again.`,
        { status: s.status },
      );
    assertBudgetLeft(s);
    const history = await deps.store.history(id);
    const kept = pick(history, s);
    // The turn the answer followed: a user turn, maybe with the tool changes the runner told the model before the
    // answer's request after it (`system` messages), which stay: the rerun's request carries them, as `retry`'s does.
    let asked = Math.min(kept, history.length) - 1;
    while (asked >= 0 && history[asked]!.role === 'system') asked--;
    if (kept < 1 || kept > history.length || asked < 0 || history[asked]!.role !== 'user')
      throw conflict(
        'nothing_to_retry',
        'No user turn precedes that answer in the history; there is nothing to run again.',
      );
    const cut = await recordsAfter(deps, s, s.msgBase + kept);
    const sent = toolsSentBefore(deps, s, history, kept);
    const iteration = s.iteration - cut.turns;
    const run = runOps(
      { ...s, status: 'idle' },
      { pending: null, iteration, runStart: iteration, compactions: s.compactions - cut.skipped },
    );
    return {
      ops: {
        ...run,
        ...(kept < history.length ? { trim_msgs: kept } : {}),
        ...(cut.keep < recordCount(s) ? { trim_iters: cut.keep } : {}),
        hset: { ...run.hset, thread: '', ...(sent ? { tools_sent: JSON.stringify(sent) } : {}) },
        events: [eventOf('messages.replaced', { message_count: kept }), ...(run.events ?? [])],
      },
      starts: true,
      ...(applied ? { applied: applied() } : {}),
      // A failed step's sub-agents its look has not cancelled yet, and its tasks still out, if any, go with it.
      drops: await childrenAtWork(deps.store, s),
      after: () => dropTasks(deps, s),
    };
  });
}

/**
 * What the model knew of the tools before the history's messages from `kept` on, which a rerun cuts: `tools_sent`
 * with the changes those messages told (a run's tool changes between its turns) undone, as a fork does. The rerun
 * tells the model the change from there to `tools` again. Null when the cut holds no change.
 */
function toolsSentBefore(
  deps: SessionDeps,
  s: SessionState,
  history: readonly StoredMessage[],
  kept: number,
): ToolRef[] | null {
  if (s.toolsSent === null) return null;
  const cut = history.slice(kept).filter((m) => m.role === 'system');
  const before = toolsBeforeChanges(s.toolsSent, cut, declaredTools(s));
  return before ? asDeclared(deps, s, before, history.slice(0, kept)) : null;
}

/**
 * The iteration records of the turns whose replies are at `cutAt` (an index of the session's whole record) or after:
 * how many records stay, how many turns and skipped compactions (no message of their own) go with them. Read from the
 * newest back, 32 at a time, to the first record before the cut, or of a history replaced since (`replacedAt`: its
 * indexes are of another history). A compaction after the cut: 409 (its summary took the turns before it out).
 */
async function recordsAfter(deps: SessionDeps, s: SessionState, cutAt: number) {
  let turns = 0;
  let skipped = 0;
  for (let end = recordCount(s) - 1; end >= 0; end -= 32) {
    const from = Math.max(0, end - 31);
    const records = await deps.store.iterationRecords(s.id, from, end);
    for (let i = records.length - 1; i >= 0; i--) {
      const r = records[i]!;
      const n = from + i + 1;
      if (n <= s.replacedAt || (r.reply_index >= 0 && r.reply_index < cutAt))
        return { keep: n, turns, skipped };
      if (r.kind !== 'compaction') turns++;
      else if (r.reply_index < 0) skipped++;
      else
        throw conflict('nothing_to_retry', 'A compaction ran during that answer: it cannot be made again.');
    }
  }
  return { keep: 0, turns, skipped };
}
