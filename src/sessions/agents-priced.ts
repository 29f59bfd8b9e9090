/**
 * The price check of a session's sub-agents under its dollar budget (create and PATCH of budget or tools): their
 * turns count toward it (spec §7.6).
 */
import { DEFAULT_MODEL, isAgentTool } from '../schemas.js';
import type { SessionDeps } from './mutate.js';

/** The model a create body runs (`model`, else `params.model`, else the default). */
function modelOf(body: Record<string, unknown>): string {
  const params = body['params'];
  const fromParams =
    typeof params === 'object' && params !== null && 'model' in params ? params.model : undefined;
  const model = body['model'] ?? fromParams;
  return typeof model === 'string' ? model : DEFAULT_MODEL;
}

/**
 * Under a dollar budget of the session's (`budgetUsd`), every sub-agent's model, at any depth, needs a price (400
 * `unknown_model_price`): its children's turns count toward the budget (spec §7.6), and a child of an unpriced model
 * could never start. The tenant's cap is checked for each child by its own build.
 */
export function assertAgentsPriced(
  deps: SessionDeps,
  tools: readonly unknown[],
  budgetUsd: number | undefined,
) {
  if (budgetUsd === undefined) return;
  for (const t of tools) {
    if (!isAgentTool(t)) continue;
    deps.store.spend.assertPriced(modelOf(t.session), budgetUsd);
    const nested = t.session['tools'];
    if (Array.isArray(nested)) assertAgentsPriced(deps, nested, budgetUsd);
  }
}
