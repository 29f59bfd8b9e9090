/**
 * `PUT /v1/sessions/:id/messages`: the whole history replaced (the runner's `setMessagesParams`), on a session that is
 * not running and waits for no client but a review (`idle`, `failed`, reviewing a turn or tool results). The history is checked as create checks one; the session's
 * message thread is dropped (the next run creates one), and so is a failed step's pending state.
 */
import { assertBudgetLeft } from '../engine/budget.js';
import { requiredAction } from '../engine/status.js';
import { Conflict, InvalidRequest, conflict } from '../errors.js';
import { checkHistory, type StoredMessage } from '../history.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { recordCount, type SessionState } from '../store/session-state.js';
import { normalize } from './create.js';
import { mutate, runOps, statusOps, type MutationResult, type SessionDeps } from './mutate.js';
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
    const ops: ApplyOps = {
      ...status,
      // The list keeps its first `kept` entries, rewritten in place; the rest are pushed (a history is never empty).
      ...(kept > 0 && kept < current ? { trim_msgs: kept } : {}),
      ...(kept > 0 ? { lset_msgs: encoded.slice(0, kept).map((m, i): [number, string] => [i, m]) } : {}),
      ...(messages.length > kept ? { push_msgs: encoded.slice(kept) } : {}),
      hset: { ...status.hset, thread: '', replaced_at: String(recordCount(s)) },
      events: [
        eventOf('messages.replaced', { message_count: messages.length }),
        ...(s.status !== 'idle' ? (status.events ?? []) : []),
      ],
    };
    return { guard: { rev: s.revision, status: [s.status] }, ops };
  });
}

/**
 * The session run again from the first `keep(history, s)` messages of its history (the chat's `regenerate-message`):
 * what follows is dropped, a waiting step with it, and so is the message thread (the history was rewritten); a run
 * starts on what is left, which ends with a user turn, in the same write. `keep` answers from the history as read for
 * this write (the revision guards it). Not while a turn runs (409 `session_running`), nor with the budget spent.
 */
export function rerunFrom(
  deps: SessionDeps,
  tenant: string,
  id: string,
  keep: (history: StoredMessage[], s: SessionState) => number,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, undefined, async (s) => {
    if (s.status === 'running')
      throw conflict('session_running', 'A turn is in progress; cancel it first or wait.');
    assertBudgetLeft(s);
    const history = await deps.store.history(id);
    const kept = keep(history, s);
    if (kept < 1 || kept > history.length || history[kept - 1]!.role !== 'user')
      throw conflict(
        'nothing_to_retry',
        'No user turn precedes that answer in the history; there is nothing to run again.',
      );
    const run = runOps({ ...s, status: 'idle' }, { pending: null });
    return {
      ops: {
        ...run,
        ...(kept < history.length ? { trim_msgs: kept } : {}),
        hset: { ...run.hset, thread: '', replaced_at: String(recordCount(s)) },
        events: [eventOf('messages.replaced', { message_count: kept }), ...(run.events ?? [])],
      },
      starts: true,
    };
  });
}
