/**
 * The price check of a session's sub-agents under its dollar budget (create and PATCH of budget or tools): their
 * turns count toward it (spec §7.6).
 */
import type { PricedParams } from '../cost/spend.js';
import { DEFAULT_MODEL, isAgentTool } from '../schemas.js';
import type { SessionDeps } from './mutate.js';

/** What a create body runs on: its model (`model`, else `params.model`, else the default) and `params.fallbacks`. */
function pricedOf(body: Record<string, unknown>): PricedParams {
  const raw = body['params'];
  const params = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>) : {};
  const model = body['model'] ?? params['model'];
  return { model: typeof model === 'string' ? model : DEFAULT_MODEL, fallbacks: params['fallbacks'] };
}

/**
 * Under a dollar budget of the session's (`budgetUsd`), every sub-agent's model and fallback models, at any depth,
 * need a price (400 `unknown_model_price`): its children's turns count toward the budget (spec §7.6), and a child of
 * an unpriced model could never start. The tenant's cap is checked for each child by its own build.
 */
export function assertAgentsPriced(
  deps: SessionDeps,
  tools: readonly unknown[],
  budgetUsd: number | undefined,
) {
  if (budgetUsd === undefined) return;
  for (const t of tools) {
    if (!isAgentTool(t)) continue;
    deps.store.spend.assertPriced(pricedOf(t.session), budgetUsd);
    const nested = t.session['tools'];
    if (Array.isArray(nested)) assertAgentsPriced(deps, nested, budgetUsd);
  }
}
