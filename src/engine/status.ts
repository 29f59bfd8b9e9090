import type { PendingStep } from '../store/pending.js';
import type { SessionState } from '../store/session-state.js';

export interface RequiredAction {
  type: 'approve_tool_calls' | 'review_tool_results' | 'submit_tool_results' | 'review_turn';
  tool_calls: Array<{ id: string; name: string; input: unknown }>;
  tool_results: Array<{ tool_use_id: string; content: unknown; is_error: boolean }>;
  /** `review_turn`: the reply under review. */
  message?: { role: 'assistant'; content: unknown; stop_reason: string | null };
  /** When the action times out (policy `action_timeout_s`); absent: never. */
  expires_at?: string;
}

/**
 * What a client must do before the run can go on, derived from the pending tool step: decisions first, then
 * client tools' results, then the review. Null when nothing waits.
 */
export function requiredAction(
  status: SessionState['status'],
  pending: PendingStep | null,
  due: number | null = null,
): RequiredAction | null {
  if (status !== 'requires_action' || !pending) return null;
  const deadline = due ? { expires_at: new Date(due).toISOString() } : {};
  if (pending.turn) {
    return {
      type: 'review_turn',
      tool_calls: pending.calls.map(({ id, name, input }) => ({ id, name, input })),
      tool_results: [],
      message: { role: 'assistant', content: pending.turn.content, stop_reason: pending.turn.stop_reason },
      ...deadline,
    };
  }
  const results = pending.calls.flatMap((c) =>
    c.result ? [{ tool_use_id: c.id, content: c.result.content, is_error: c.result.is_error }] : [],
  );
  const undecided = pending.calls.filter((c) => c.approval === 'required');
  if (undecided.length > 0) {
    return {
      type: 'approve_tool_calls',
      tool_calls: undecided.map(({ id, name, input }) => ({ id, name, input })),
      tool_results: results,
      ...deadline,
    };
  }
  const missing = pending.calls.filter((c) => c.kind === 'client' && !c.result);
  if (missing.length > 0) {
    return {
      type: 'submit_tool_results',
      tool_calls: missing.map(({ id, name, input }) => ({ id, name, input })),
      tool_results: results,
      ...deadline,
    };
  }
  return { type: 'review_tool_results', tool_calls: [], tool_results: results, ...deadline };
}

/** `session.status` event data. */
export function statusEvent(
  s: Pick<SessionState, 'status' | 'pending' | 'stopReason' | 'error'> & { actionDue?: number | null },
): string {
  return JSON.stringify({
    status: s.status,
    required_action: requiredAction(s.status, s.pending, s.actionDue ?? null),
    stop_reason: s.stopReason,
    error: s.error,
  });
}
