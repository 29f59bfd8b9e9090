import { toolNames } from '../engine/tools-change.js';
import { conflict } from '../errors.js';
import { toolCallsOf } from '../history.js';
import { isAgentTool } from '../schemas.js';
import { checkAgents } from './create.js';
import type { SessionState, ToolRef } from '../store/session-state.js';
import type { SessionDeps } from './mutate.js';
import { eventOf } from '../events/schemas.js';
import { withoutSecrets } from './secrets.js';

/**
 * `PATCH /v1/sessions/:id` with `tools`: the session's new tool set, in create's entry forms, checked as create checks
 * them. It is stored as `tools` at once (the session shows it); the model is told from the next turn on, by the run
 * (src/engine/tools-change.ts). The first PATCH records the set the session's runners send as `tools` (`tools_base`)
 * and what the model knows (`tools_sent`), which from then on differ from `tools` until the run catches up.
 *
 * A tool with a call that waits (for a decision, a client's result, a review, or a tool step not run yet) cannot be
 * removed: 409 `tool_call_pending` — the call would then be answered "not found" though the client was asked about it.
 */
export async function toolsPatch(
  deps: SessionDeps,
  s: SessionState,
  tools: ToolRef[],
): Promise<{ next: Partial<SessionState>; event: [string, string] }> {
  const copies = await deps.toolbox.check(s.tenant, tools);
  await checkAgents(deps, s.tenant, tools, s.parent?.depth ?? 1);
  // A session given a sub-agent is watched by the agents' sweep from now on (src/agents/sweep.ts).
  if (tools.some(isAgentTool)) await deps.store.runs.trees.watch(s.id, s.tenant);
  // The tools of earlier sets keep their copies (the runners may still send them: tools_base); named again, a tool
  // is copied anew.
  const tenantTools = { ...s.tenantTools, ...copies };
  const scope = { tenant: s.tenant, session: s.id, tenantTools };
  const [before, after] = await Promise.all([
    toolNames(deps.toolbox, { ...scope, tools: s.tools, tenantTools: s.tenantTools }),
    toolNames(deps.toolbox, { ...scope, tools }),
  ]);
  const removed = [...before].filter((n) => !after.has(n));
  const added = [...after].filter((n) => !before.has(n));
  if (removed.length > 0) {
    const waiting = new Map<string, string>();
    for (const c of s.pending?.calls ?? []) if (!c.result) waiting.set(c.id, c.name);
    // A reply whose calls have no pending step yet (the run is about to answer them).
    const last = s.msgCount > 0 ? await deps.store.lastMessage(s.id) : null;
    for (const c of toolCallsOf(last ?? undefined)) if (!s.pending) waiting.set(c.id, c.name);
    for (const [id, name] of waiting) {
      if (removed.includes(name)) {
        throw conflict(
          'tool_call_pending',
          `The tool "${name}" has a call that waits (${id}); answer, decide or cancel it before removing the tool.`,
          { tool: name, tool_use_id: id },
        );
      }
    }
  }
  const next: Partial<SessionState> = { tools, tenantTools };
  // Before the first change the runners send `tools` as created and the model knows exactly that.
  if (s.toolsBase === null) next.toolsBase = s.tools;
  if (s.toolsSent === null) next.toolsSent = s.toolsBase ?? s.tools;
  return {
    next,
    event: eventOf('tools.updated', { tools: withoutSecrets(tools), added, removed, applies: 'next_turn' }),
  };
}
