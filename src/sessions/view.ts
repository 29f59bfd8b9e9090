import { budgetUsage } from '../engine/budget.js';
import { requiredAction } from '../engine/status.js';
import type { SessionState } from '../store/session-state.js';

/** When the session's TTL deletes it if nothing changes it (idle or failed only); null: not while it is so. */
export function expiresAt(
  s: Pick<SessionState, 'ttlS' | 'status' | 'updatedAt' | 'createdAt'>,
): string | null {
  if (!s.ttlS || (s.status !== 'idle' && s.status !== 'failed')) return null;
  return new Date((s.updatedAt || s.createdAt) + s.ttlS * 1000).toISOString();
}

/** The session resource of the API (spec §2). */
export function sessionView(s: SessionState) {
  return {
    id: s.id,
    object: 'session' as const,
    status: s.status,
    revision: s.revision,
    iteration: s.iteration,
    compactions: s.compactions,
    params: s.params,
    tools: s.tools,
    max_iterations: s.maxIterations,
    approval: s.approval,
    review_tool_results: s.review,
    on_tool_error: s.onToolError,
    on_max_tokens: s.onMaxTokens,
    cache_tool_results: s.cacheToolResults,
    stream: s.stream,
    budget: s.budget,
    run_tools_eagerly: s.runToolsEagerly,
    pause_after_turn: s.pauseAfterTurn,
    compaction: s.compaction,
    compaction_pending: s.compactRequest !== null,
    action_timeout_s: s.actionTimeoutS,
    on_action_timeout: s.onActionTimeout,
    ttl_s: s.ttlS,
    expires_at: expiresAt(s),
    required_action: requiredAction(s.status, s.pending, s.action.due),
    stop_reason: s.stopReason,
    error: s.error,
    usage: { ...s.usage, ...budgetUsage(s) },
    message_count: s.msgCount,
    metadata: s.metadata,
    parent: s.parent ? { session_id: s.parent.session_id, tool_use_id: s.parent.tool_use_id } : null,
    created_at: new Date(s.createdAt).toISOString(),
    updated_at: new Date(s.updatedAt || s.createdAt).toISOString(),
  };
}

export type SessionView = ReturnType<typeof sessionView>;

/**
 * The session's receipt (`SessionReceipt`): what a change answers a client token without `read` (spec §7.2), which
 * may act on the session but not see it: who it is and where it stands.
 */
export function receiptOf(
  v: Pick<SessionView, 'id' | 'object' | 'status' | 'revision' | 'created_at' | 'updated_at'>,
) {
  const { id, object, status, revision, created_at, updated_at } = v;
  return { id, object, status, revision, created_at, updated_at };
}

/**
 * A refusal's details as a client token without `read` may see them: without `required_action` (the pending calls
 * and their inputs, which 409 `tool_calls_undecided` names to a caller that may read the session).
 */
export function withoutAction(details: unknown): unknown {
  if (typeof details !== 'object' || details === null || !('required_action' in details)) return details;
  const { required_action: _hidden, ...rest } = details;
  return rest;
}
