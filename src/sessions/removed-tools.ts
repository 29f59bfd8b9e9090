/**
 * Bare tool names a session's tool set holds that no tool source knows: tools a history's changes took away, put
 * back by working the set back from them (history-tools.ts `toolsBeforeChanges`: a create given a history with tool
 * changes, a fork from before a change). A history keeps a removal's name only, so such a name is a client tool whose
 * definition went with it: it takes the definition the history's last `tool_addition` of that name gave, or else a
 * stand-in the model cannot call (the API takes the removal only of a declared tool). Which names are unknown is the
 * caller's to say (a create asks the tool sources; a fork knows its own tools).
 */
import type { StoredMessage } from '../history.js';
import type { ClientTool } from '../schemas.js';
import type { ToolRef } from '../store/session-state.js';
import { addedDefinitions } from './history-tools.js';

/** The stand-in of a client tool a history removed, whose definition it does not hold. */
const standIn = (name: string): ClientTool => ({
  name,
  description: 'A tool this conversation removed (its definition was not kept).',
  input_schema: { type: 'object', properties: {} },
});

/** `tools` with each bare name of `unknown` made a client tool: from `history` (one pass over it), or a stand-in. */
export function asClientTools(
  tools: readonly ToolRef[],
  unknown: ReadonlySet<string>,
  history: readonly StoredMessage[],
): ToolRef[] {
  if (unknown.size === 0) return [...tools];
  const defined = addedDefinitions(history);
  return tools.map((t) => (typeof t === 'string' && unknown.has(t) ? (defined.get(t) ?? standIn(t)) : t));
}

/** The bare names of `tools`. */
export const bareNames = (tools: readonly ToolRef[]): string[] =>
  tools.filter((t): t is string => typeof t === 'string');
