import { conflict } from '../errors.js';
import type { StoredMessage } from '../history.js';
import type { BudgetPolicy } from '../schemas.js';
import type { SessionState, Usage } from '../store/session-state.js';
import { commit, idleOps } from './commit.js';
import type { RunDeps, RunHandle } from './run-handle.js';

/**
 * Policy `budget` (`{"total_tokens": N}`): the tokens a session's turns may use in total. Tokens are counted as the
 * session's `usage` counts them: input + output + cache creation + cache read, every turn of every run (a reply
 * dropped by an `on_max_tokens` retry included: it was billed). The check sits where a run would send its next turn:
 * once the total is N or more, the run stops there — after the tool results of the turn that crossed the line — with
 * `stop_reason: "budget_exhausted"`, and the session is idle. A turn already sent is never cut: a budget is a limit
 * on turns started, so the total may end above N by one turn's usage.
 */

export const BUDGET_EXHAUSTED = 'budget_exhausted';

/** The session's total tokens, as the budget counts them. */
export function totalTokens(u: Usage): number {
  return u.input_tokens + u.output_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
}

/** Whether `spent` tokens leave nothing of `budget` (no budget: never). */
export function budgetExhausted(budget: BudgetPolicy, spent: number): boolean {
  return budget !== null && spent >= budget.total_tokens;
}

/** The budget's part of the session's `usage` in the API: the total and what is left of the budget. */
export function budgetUsage(s: Pick<SessionState, 'usage' | 'budget'>) {
  const total = totalTokens(s.usage);
  return {
    total_tokens: total,
    budget_total_tokens: s.budget?.total_tokens ?? null,
    budget_remaining_tokens: s.budget ? Math.max(0, s.budget.total_tokens - total) : null,
  };
}

/**
 * 409 `budget_exhausted` for a request that would start turns (a new message, `continue`) while the session's budget
 * is spent: the client raises it first (PATCH `budget`).
 */
export function assertBudgetLeft(s: Pick<SessionState, 'usage' | 'budget'>): void {
  if (!budgetExhausted(s.budget, totalTokens(s.usage))) return;
  throw conflict(
    BUDGET_EXHAUSTED,
    `The session has used ${totalTokens(s.usage)} tokens of its budget of ${s.budget?.total_tokens}; raise \`budget.total_tokens\` with PATCH first.`,
    budgetUsage(s),
  );
}

/**
 * Ends the run for its budget: idle with `stop_reason: "budget_exhausted"`, in one commit that also keeps any queued
 * follow-ups (merged onto a trailing user turn, or as a new one) so nothing a client sent is lost — the next run sends
 * them once the budget is raised.
 */
export async function stopForBudget(
  deps: RunDeps,
  run: RunHandle,
  last: StoredMessage | undefined,
): Promise<void> {
  // Idle whether or not anything was queued; the queue merge (after the status ops, in the same script) keeps the
  // follow-ups.
  await commit(deps, run, {
    ...idleOps(BUDGET_EXHAUSTED),
    queue: last?.role === 'user' ? { into_last: true } : {},
  });
  await deps.store.runs.unmarkDue(run.id);
}
