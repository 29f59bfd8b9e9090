import { microsToUsd, usdToMicros } from '../cost/prices.js';
import { conflict } from '../errors.js';
import type { StoredMessage } from '../history.js';
import type { BudgetPolicy } from '../schemas.js';
import type { PricedParams, TenantSpend } from '../cost/spend.js';
import type { SessionError, SessionState, Usage } from '../store/session-state.js';
import { commit, followUpsAfter, idleOps } from './commit.js';
import type { RunDeps, RunHandle } from './run-handle.js';

/**
 * Policy `budget` (`{"total_tokens"?: N, "cost_usd"?: D}`): the tokens, and the dollars at list prices
 * (src/cost/prices.ts), a session's turns may use in total. Tokens are counted as the session's `usage` counts them:
 * input + output + cache creation + cache read, every turn of every run (a reply dropped by an `on_max_tokens` retry
 * included: it was billed), and so is the cost. The check sits where a run would send its next turn: once either
 * total reaches its ceiling, the run stops there — after the tool results of the turn that crossed the line — with
 * `stop_reason: "budget_exhausted"`, and the session is idle. A turn already sent is never cut: a budget is a limit
 * on turns started, so the total may end above it by one turn's usage. The tenant's daily cap
 * (TENANT_MAX_COST_USD_PER_DAY) is checked at the same places and stops the run with `tenant_budget_exhausted`.
 * Both are checked before every model request: a paused turn's continuation and an `on_max_tokens` retry too.
 */

export const BUDGET_EXHAUSTED = 'budget_exhausted';

/** The session's total tokens, as the budget counts them. */
export function totalTokens(u: Usage): number {
  return u.input_tokens + u.output_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens;
}

/** What a session's turns used, as the budget counts it. */
export interface Spent {
  tokens: number;
  /** Micro-dollars of its priced turns. */
  micros: number;
}

/** Its sub-agents' usage included (`childUsage`: added as each answered its call). */
export const spentOf = (s: Pick<SessionState, 'usage' | 'cost' | 'childUsage'>): Spent => ({
  tokens: totalTokens(s.usage) + totalTokens(s.childUsage),
  micros: s.cost.micros + s.childUsage.micros,
});

/** Whether `spent` leaves nothing of `budget` (no budget: never). */
export function budgetExhausted(budget: BudgetPolicy, spent: Spent): boolean {
  if (budget === null) return false;
  if (budget.total_tokens !== undefined && spent.tokens >= budget.total_tokens) return true;
  return budget.cost_usd !== undefined && spent.micros >= usdToMicros(budget.cost_usd);
}

/**
 * A sub-agent's budget (spec §7.6: children count toward the parent's budget): its own, capped by its share of what
 * is left of its parent's when the child starts — less what its siblings still at work may spend (`reserved`: their
 * budgets, `reservedBy`), split evenly among the `ways` children started together (what one leaves of its share by a
 * smaller budget of its own goes to those after it) — or 'spent' when its share is nothing (the child does not
 * start). A tree then spends at most its root's budget plus one turn per session of it (each turn already sent is
 * never cut), where an uncapped child could spend any amount before its usage reached its parent, and siblings
 * started together could each spend all that was left.
 */
export function childBudget(
  parent: Pick<SessionState, 'usage' | 'budget' | 'cost' | 'childUsage'>,
  own: BudgetPolicy,
  reserved: Spent = { tokens: 0, micros: 0 },
  ways = 1,
): BudgetPolicy | 'spent' {
  const cap = parent.budget;
  if (cap === null) return own;
  const mine = spentOf(parent);
  const out: NonNullable<BudgetPolicy> = { ...own };
  if (cap.total_tokens !== undefined) {
    const share = Math.floor((cap.total_tokens - mine.tokens - reserved.tokens) / ways);
    if (share <= 0) return 'spent';
    out.total_tokens = Math.min(own?.total_tokens ?? Infinity, share);
  }
  if (cap.cost_usd !== undefined) {
    const share = Math.floor((usdToMicros(cap.cost_usd) - mine.micros - reserved.micros) / ways);
    if (share <= 0) return 'spent';
    out.cost_usd = Math.min(own?.cost_usd ?? Infinity, microsToUsd(share));
  }
  return out;
}

/**
 * What a sub-agent whose usage has not reached its parent yet may still add to it: an ended one what it spent, one
 * at work its budget's ceilings (what it spent where it has none).
 */
export function reservedBy(
  child: Pick<SessionState, 'status' | 'usage' | 'budget' | 'cost' | 'childUsage'>,
): Spent {
  const spent = spentOf(child);
  if (child.status === 'idle' || child.status === 'failed') return spent;
  const tokens = child.budget?.total_tokens;
  const usd = child.budget?.cost_usd;
  return {
    tokens: tokens === undefined ? spent.tokens : Math.max(tokens, spent.tokens),
    micros: usd === undefined ? spent.micros : Math.max(usdToMicros(usd), spent.micros),
  };
}

/**
 * Why a turn of `params` cannot be sent under the session's dollar ceilings: the run's error (`unknown_model_price`)
 * when the budget's `cost_usd` or the tenant's cap applies and the model, or a fallback model of `params.fallbacks`,
 * has no price (spec §7.4: no dollar ceiling can pass for it), else null. The routes that start a run refuse it with 400 first; this is the check of the runs
 * no route's check comes before — an action deadline's, a sub-agent's answer, a takeover, a PATCH of the model on a
 * replica without the cap — checked where every model request is (run.ts `step`, the runner's `spentOut`), from the
 * fields the run holds (no read).
 */
export function unpricedError(
  spend: TenantSpend,
  params: PricedParams,
  budget: BudgetPolicy,
): SessionError | null {
  const refusal = spend.unpriced(params, budget?.cost_usd);
  return refusal && { code: refusal.code, message: refusal.message, retryable: false };
}

/** The session's `cost_usd`: null once a turn of a model without a price was counted. */
const sessionCostUsd = (s: Pick<SessionState, 'cost'>): number | null =>
  s.cost.unpriced > 0 ? null : microsToUsd(s.cost.micros);

/** The budget's part of the session's `usage` in the API: the totals and what is left of the budget. */
export function budgetUsage(s: Pick<SessionState, 'usage' | 'budget' | 'cost' | 'childUsage'>) {
  const total = totalTokens(s.usage);
  const cost = sessionCostUsd(s);
  const costCap = s.budget?.cost_usd;
  const spent = spentOf(s);
  const k = s.childUsage;
  return {
    total_tokens: total,
    budget_total_tokens: s.budget?.total_tokens ?? null,
    budget_remaining_tokens:
      s.budget?.total_tokens !== undefined ? Math.max(0, s.budget.total_tokens - spent.tokens) : null,
    cost_usd: cost,
    server_tool_use: s.cost.serverToolUse,
    budget_cost_usd: costCap ?? null,
    budget_remaining_cost_usd:
      costCap !== undefined ? microsToUsd(Math.max(0, usdToMicros(costCap) - spent.micros)) : null,
    /** The sub-agents' (and theirs'): counted in the budget's remaining, not in the session's own totals. */
    children: {
      input_tokens: k.input_tokens,
      output_tokens: k.output_tokens,
      cache_creation_input_tokens: k.cache_creation_input_tokens,
      cache_read_input_tokens: k.cache_read_input_tokens,
      total_tokens: totalTokens(k),
      cost_usd: k.unpriced > 0 ? null : microsToUsd(k.micros),
    },
  };
}

/**
 * 409 `budget_exhausted` for a request that would start turns (a new message, `continue` of an idle session) while
 * the session's budget is spent: the client raises it first (PATCH `budget`). An answer to the step a run waits on (a
 * decision, a result, `continue` of a `requires_action` session) is not refused: the run runs that step's calls and
 * stops before its next turn.
 */
export function assertBudgetLeft(s: Pick<SessionState, 'usage' | 'budget' | 'cost' | 'childUsage'>): void {
  const spent = spentOf(s);
  if (!budgetExhausted(s.budget, spent)) return;
  const tokensSpent = s.budget?.total_tokens !== undefined && spent.tokens >= s.budget.total_tokens;
  throw conflict(
    BUDGET_EXHAUSTED,
    tokensSpent
      ? `The session (with its sub-agents) has used ${spent.tokens} tokens of its budget of ${s.budget?.total_tokens}; raise \`budget.total_tokens\` with PATCH first.`
      : `The session (with its sub-agents) has cost ${microsToUsd(spent.micros)} USD of its budget of ${s.budget?.cost_usd}; raise \`budget.cost_usd\` with PATCH first.`,
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
  stopReason: string = BUDGET_EXHAUSTED,
): Promise<void> {
  // Idle whether or not anything was queued; the queue merge (after the status ops, in the same script) keeps the
  // follow-ups.
  await commit(deps, run, { ...idleOps(stopReason), ...followUpsAfter(last) }, () =>
    deps.store.runs.end(run, run.tenant ?? undefined),
  );
}
