/**
 * Bare tool names a session's tool set holds that no tool source knows: tools a history's changes took away, put
 * back by working the set back from them (history-tools.ts `toolsBeforeChanges`: a create given a history with tool
 * changes, a fork from before a change). A history keeps a removal's name only, so such a name is a client tool whose
 * definition went with it: it takes the definition the history's last `tool_addition` of that name gave, or else a
 * stand-in the model cannot call (the API takes the removal only of a declared tool). Names a tool source knows
 * (server, tenant, memory tools) stay as they are.
 */
import { InvalidRequest } from '../errors.js';
import type { StoredMessage } from '../history.js';
import type { ClientTool } from '../schemas.js';
import type { ToolRef } from '../store/session-state.js';
import { addedDefinition } from './history-tools.js';
import type { SessionDeps } from './mutate.js';

/** The stand-in of a client tool a history removed, whose definition it does not hold. */
const standIn = (name: string): ClientTool => ({
  name,
  description: 'A tool this conversation removed (its definition was not kept).',
  input_schema: { type: 'object', properties: {} },
});

/**
 * `tools` with each bare name outside `given` (names the caller gave, checked already) that no tool source knows
 * made a client tool, from `history` or a stand-in. One check per such name, all at once (a name per round trip
 * would make a crafted history of many removals cost as many passes).
 */
export async function resolveRemovedNames(
  deps: SessionDeps,
  tenant: string,
  tools: readonly ToolRef[],
  given: readonly ToolRef[],
  history: readonly StoredMessage[],
): Promise<ToolRef[]> {
  const names = [...new Set(tools.filter((t): t is string => typeof t === 'string' && !given.includes(t)))];
  const unknown = new Set(
    (
      await Promise.all(
        names.map(async (n) => {
          try {
            await deps.toolbox.check(tenant, [n]);
            return [];
          } catch (err) {
            if (err instanceof InvalidRequest && err.code === 'unknown_tool') return [n];
            throw err;
          }
        }),
      )
    ).flat(),
  );
  if (unknown.size === 0) return [...tools];
  return tools.map((t) =>
    typeof t === 'string' && unknown.has(t) ? (addedDefinition(history, t) ?? standIn(t)) : t,
  );
}
