/**
 * Bare tool names a session's tool set holds that no tool source knows: tools a history's changes took away, put
 * back by working the set back from them (history-tools.ts `toolsBeforeChanges`: a create given a history with tool
 * changes, a fork from before a change). A history keeps a removal's name only, so such a name is a client tool whose
 * definition went with it: it takes the definition the history's last `tool_addition` of that name gave, or else a
 * stand-in the model cannot call (the API takes the removal only of a declared tool). Which names are unknown is the
 * caller's to say (a create asks the tool sources; a fork knows its own tools).
 */
import { InvalidRequest } from '../errors.js';
import type { StoredMessage } from '../history.js';
import { MAX_TOOLS, type ClientTool } from '../schemas.js';
import type { ToolRef } from '../store/session-state.js';
import type { TenantToolDef } from '../tenant-tools/types.js';
import { addedDefinitions, toolsBeforeChanges } from './history-tools.js';
import type { SessionDeps } from './mutate.js';
import type { SessionState } from '../store/session-state.js';

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

/**
 * The tools a history with tool changes was made over (history-tools.ts), checked as `tools` are, with the copies of
 * the tenant tools among them; null for a history that changes none. A tool the history removed that `tools` no
 * longer holds is taken by its name as a server or tenant tool, else as a client tool whose definition went with it
 * (removed-tools.ts): history in, history out holds for a history that removed a client tool.
 */
export async function baseTools(
  deps: SessionDeps,
  tenant: string,
  tools: readonly ToolRef[],
  given: readonly StoredMessage[],
): Promise<{ tools: ToolRef[]; copies: Record<string, TenantToolDef> } | null> {
  const before = toolsBeforeChanges(tools, given);
  if (!before) return null;
  // The set a session was created with, or PATCHed to: never more than `tools` may hold.
  if (before.length > MAX_TOOLS)
    throw new InvalidRequest(
      'invalid_history',
      `The history's tool changes work back to ${before.length} tools; a session has at most ${MAX_TOOLS}.`,
    );
  const named = new Set(bareNames(tools));
  const removed = bareNames(before).filter((n) => !named.has(n));
  const base = asClientTools(before, await deps.toolbox.unknownNames(tenant, removed), given);
  return { tools: base, copies: await deps.toolbox.check(tenant, base) };
}

/**
 * A tool set worked out from a history's changes (`toolsBeforeChanges`, `toolsAfterChanges`), its bare names as
 * session `s` declares them: the definition `s` holds under that name (what it told the model, its tools, its base),
 * else the name of a server, memory or tenant tool `s` knows (the registry is not asked: a tool of that name
 * registered since is not the one the history changed), else a client tool as `history` last added it (or a
 * stand-in): never a bare name no tool source knows, which the runs would drop unseen, never telling its removal.
 */
export function asDeclared(
  deps: Pick<SessionDeps, 'toolbox'>,
  s: Pick<SessionState, 'tools' | 'toolsSent' | 'toolsBase' | 'tenantTools'>,
  set: readonly ToolRef[],
  history: readonly StoredMessage[],
): ToolRef[] {
  const declared = declaredTools(s);
  const named = set.map((t) =>
    typeof t === 'string'
      ? (declared.find((d) => typeof d !== 'string' && 'name' in d && d.name === t) ?? t)
      : t,
  );
  const known = new Set([...deps.toolbox.reservedNames(), ...Object.keys(s.tenantTools)]);
  return asClientTools(named, new Set(bareNames(named).filter((n) => !known.has(n))), history);
}

/** Every definition session `s` holds: what it told the model, its tools, its base. */
export const declaredTools = (s: Pick<SessionState, 'tools' | 'toolsSent' | 'toolsBase'>): ToolRef[] => [
  ...(s.toolsSent ?? []),
  ...s.tools,
  ...(s.toolsBase ?? []),
];
