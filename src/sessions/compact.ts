import type { z } from 'zod';
import { assertBudgetLeft } from '../engine/budget.js';
import { endsPaused, isSummary } from '../engine/compaction.js';
import { statusEvent } from '../engine/status.js';
import { badRequest, conflict } from '../errors.js';
import { pendingToolCalls } from '../history.js';
import type { CompactionPolicy, SessionParams, compactBody } from '../schemas.js';
import type { CompactRequest, SessionState } from '../store/session-state.js';
import { mutate, type MutationResult, type SessionDeps } from './mutate.js';
import { eventOf } from '../events/schemas.js';

/** Whether `params.context_management` holds a compaction edit (the API compacts server-side then). */
function hasCompactionEdit(params: SessionParams): boolean {
  const cm: unknown = params['context_management'];
  if (typeof cm !== 'object' || cm === null || !('edits' in cm) || !Array.isArray(cm.edits)) return false;
  return cm.edits.some(
    (e: unknown) =>
      typeof e === 'object' && e !== null && 'type' in e && String(e.type).startsWith('compact_'),
  );
}

/**
 * 400 when a compaction of ours would meet a server-side compaction edit: the API takes no compaction request
 * together with one (the SDK runner refuses it too). Checked at create and PATCH (with the `compaction` policy) and
 * by the route.
 */
export function checkCompactionParams(params: SessionParams, policy: CompactionPolicy | undefined): void {
  if (policy && hasCompactionEdit(params)) {
    throw badRequest(
      'The `compaction` policy cannot be combined with a compaction edit in `params.context_management`: the API compacts server-side then. Use one or the other.',
      [{ path: '/compaction', code: 'custom', message: 'conflicts with params.context_management' }],
    );
  }
}

/**
 * 400 when a PATCH would add a compaction edit while a compaction asked for is not made yet (`compaction_pending`):
 * the API takes no compaction request with one, so every run would try it and fail, and the route could not replace
 * it (it refuses the edit too).
 */
export function checkEditWithPending(params: SessionParams, pending: CompactRequest | null): void {
  if (pending && hasCompactionEdit(params)) {
    throw badRequest(
      'A compaction asked for with `POST …/compact` is not made yet (`compaction_pending`), and the API takes no compaction request with a compaction edit in `params.context_management`. Add the edit once it is done.',
      [
        {
          path: '/params/context_management',
          code: 'custom',
          message: 'conflicts with the pending compaction',
        },
      ],
    );
  }
}

/**
 * `POST /v1/sessions/:id/compact`. Running: scheduled for the runner's next turn boundary (after the current turn and
 * its tool calls). Idle or failed: a run of its own, one compaction request, after which the session is back in the
 * status it had. Refused: while waiting for a client (409 `invalid_status`), while a compaction is scheduled or in
 * flight (409 `compaction_pending`), idle or failed with the budget spent (409 `budget_exhausted`), when the history ends with tool calls without results (409
 * `unanswered_tool_calls`: the API compacts only between turns), and with nothing (or only a summary) to compact.
 */
export function compactSession(
  deps: SessionDeps,
  tenant: string,
  id: string,
  body: z.infer<typeof compactBody>,
  ifMatch?: number,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    const instructions = body?.instructions ?? s.compaction?.instructions ?? null;
    if (hasCompactionEdit(s.params)) {
      throw badRequest(
        '`params.context_management` has a compaction edit: the API compacts this session server-side and takes no compaction request with it. Remove the edit (PATCH params) to compact with this route.',
      );
    }
    if (s.status === 'requires_action') {
      throw conflict(
        'invalid_status',
        'The session waits for a client (required_action); compact once the run goes on or ends.',
        { status: s.status },
      );
    }
    const guard = { status: [s.status], ...(ifMatch !== undefined ? { rev: ifMatch } : {}) };
    if (s.status === 'running') {
      if (s.compactRequest) {
        throw conflict(
          'compaction_pending',
          'A compaction of this session is already scheduled or in flight.',
        );
      }
      const request: CompactRequest = { instructions };
      return {
        guard,
        ops: {
          hset: { compact: JSON.stringify(request) },
          // The runner reloads the session at its next boundary (as after a PATCH) and schedules the compaction.
          hincr: { params_rev: 1 },
          events: [eventOf('session.updated', { compaction_requested: { instructions } })],
        },
        queued: true,
        after: () => deps.store.publishControl(id, 'params'),
      };
    }
    // Idle or failed. A request left by a run that ended (or failed) is replaced by this one. A compaction is a model
    // request: not with the budget spent (409 `budget_exhausted`, as a new message).
    assertBudgetLeft(s);
    await checkHistoryToCompact(deps, s);
    const request: CompactRequest = {
      instructions,
      resume: { status: s.status, stop_reason: s.stopReason, error: s.error },
    };
    const next: SessionState = { ...s, status: 'running', stopReason: null, error: null };
    return {
      guard,
      ops: {
        hset: {
          status: 'running',
          stop_reason: '',
          error: '',
          control: '',
          compact: JSON.stringify(request),
        },
        events: [
          eventOf('session.updated', { compaction_requested: { instructions } }),
          ['session.status', statusEvent(next)],
        ],
      },
      starts: true,
    };
  });
}

async function checkHistoryToCompact(deps: SessionDeps, s: SessionState): Promise<void> {
  if (s.msgCount === 0) throw conflict('nothing_to_compact', 'The session has no messages to compact.');
  const last = await deps.store.lastMessage(s.id);
  if (last && pendingToolCalls([last]).length > 0) {
    throw conflict(
      'unanswered_tool_calls',
      'The history ends with tool calls that have no results; the API compacts a conversation only between turns. Answer them (or resume) first.',
    );
  }
  // A reply the API paused (a `max_iterations` stop mid `pause_turn`): its continuation comes first, as in a run (the
  // runner resumes a paused turn before anything else).
  if (await endsPaused(deps.store, s, last)) {
    throw conflict(
      'unanswered_tool_calls',
      'The history ends with a reply the API paused (`pause_turn`): its turn is not over, and the API compacts a conversation only between turns. `continue` (or send a message) to resume it first.',
    );
  }
  if (s.msgCount === 1 && isSummary(last ?? undefined)) {
    throw conflict('nothing_to_compact', 'The history is a summary already.');
  }
}
