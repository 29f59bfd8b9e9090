import type { BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import type { BetaToolRunner } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import {
  BETA_CLIENT_TOOL_UNION_KEYS,
  type BetaTool,
  type BetaToolUnion,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { eventOf } from '../events/schemas.js';
import type { StoredBlock, StoredMessage } from '../history.js';
import type { SessionParams } from '../schemas.js';
import type { SessionState, ToolRef } from '../store/session-state.js';
import { runnableName, type Toolbox, type ToolScope } from '../toolbox.js';
import { anthropicToolDefinition, isAnthropicTool } from '../tools/anthropic-tools.js';
import { isMcpToolset } from '../mcp/schema.js';
import { commit } from './commit.js';
import type { RunDeps, RunHandle } from './run-handle.js';
import { serverRunnables } from './tool-step.js';

/**
 * Tool changes between turns (`PATCH tools`), told to the model the way the SDK's runner does it: `runner.addTools()`
 * and `runner.removeTools()`, which leave `params.tools` — the start of the prompt cache — as it was, and send the
 * change in a `system` message of `tool_addition` (the whole definition) and `tool_removal` (`tool_reference` by name)
 * blocks ahead of the next request (beta `inline-tools-2026-09-15`, which the runner does not add: we do). A removed
 * tool's calls are answered "not found" by the runner; an added server tool is run by it.
 *
 * The message is history like any other: committed to Redis, exactly as the runner appends it, before the request
 * that carries it, so the stored history is what the model saw and the next hand-over still extends the message
 * thread. Runners send `tools_base` (the set at create) as `tools`; `tools_sent` is what the model was told since.
 * A new runner knows only `tools_base`: a server tool added by an earlier run is added again (its runnable), so the
 * runner can run it — one more `tool_addition` of the same definition, which the API takes as a replacement.
 */

export const INLINE_TOOLS_BETA = 'inline-tools-2026-09-15';

/**
 * `p` with the inline-tools beta when the request needs it: once tool changes are in the history (`changesIn`: a
 * `system` turn), or were told to the model before (`toolsSent`), every request carries it — a compaction's as a
 * turn's.
 */
export function withInlineToolsBeta(
  p: SessionParams,
  state: Pick<SessionState, 'toolsSent'>,
  changesIn: boolean,
): SessionParams {
  if (p.betas?.includes(INLINE_TOOLS_BETA) || (state.toolsSent === null && !changesIn)) return p;
  return { ...p, betas: [...(p.betas ?? []), INLINE_TOOLS_BETA] };
}

/**
 * The session's definitions the runner only sends: client tools (a client runs them) and Anthropic-defined tools
 * (run upstream, or by a client for bash, text editor and computer), as they were given.
 */
export function clientToolDefs(state: { tools: readonly ToolRef[] }): BetaToolUnion[] {
  return state.tools.flatMap((t): BetaToolUnion[] => {
    if (typeof t !== 'object') return [];
    if (isAnthropicTool(t)) return [anthropicToolDefinition(t)];
    // Anthropic's MCP connector, as given (the API checks its fields against `params.mcp_servers`).
    if (isMcpToolset(t)) return [{ ...t }];
    if (!('input_schema' in t)) return [];
    const def: BetaTool = {
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      input_schema: t.input_schema,
      ...(t.strict !== undefined ? { strict: t.strict } : {}),
    };
    return [def];
  });
}

/** The names a tool set brings: its server and MCP tools as the toolbox resolves them, and its client tools. */
export async function toolNames(toolbox: Toolbox, scope: ToolScope): Promise<Set<string>> {
  const names = new Set((await toolbox.forSession(scope)).keys());
  for (const t of clientToolDefs(scope)) if ('name' in t) names.add(t.name);
  return names;
}

/** One tool as a runner takes it: runnable (a tool the service runs) or a raw definition (a client's). */
interface RunnerTool {
  /** Its key in the set: the tool's name, `mcp_toolset:<server>` for a toolset (whose definition has no name). */
  name: string;
  tool: BetaRunnableTool | BetaToolUnion;
  /** The API fields, as the runner writes them into a `tool_addition` (its `toolDefinition()`). */
  definition: Record<string, unknown>;
}

/** The SDK's `toolDefinition()`: a runnable tool's API fields, in its own key order (so the JSON is the same). */
function definitionOf(tool: BetaRunnableTool | BetaToolUnion): Record<string, unknown> {
  if (!('run' in tool)) return { ...tool };
  const keys: readonly string[] = BETA_CLIENT_TOOL_UNION_KEYS;
  const fields: object = 'toJSON' in tool && typeof tool.toJSON === 'function' ? tool.toJSON() : tool;
  return Object.fromEntries(Object.entries(fields).filter(([key]) => keys.includes(key)));
}

/** A tool set by name, as runners take it. */
async function runnerTools(
  deps: RunDeps,
  state: SessionState,
  tools: ToolRef[],
  durations: Map<string, number>,
): Promise<Map<string, RunnerTool>> {
  const runnable = await deps.toolbox.forSession({
    tenant: state.tenant,
    session: state.id,
    tools,
    tenantTools: state.tenantTools,
  });
  const out = new Map<string, RunnerTool>();
  const add = (name: string, tool: BetaRunnableTool | BetaToolUnion) =>
    out.set(name, { name, tool, definition: definitionOf(tool) });
  for (const tool of serverRunnables(deps, runnable, durations)) add(runnableName(tool), tool);
  for (const tool of clientToolDefs({ tools })) {
    if ('name' in tool) add(tool.name, tool);
    else if (tool.type === 'mcp_toolset') add(`mcp_toolset:${tool.mcp_server_name}`, tool);
  }
  return out;
}

/** What `tools` a session's runner sends: the set at create, so every run shares the prompt cache's prefix. */
export async function baseTools(
  deps: RunDeps,
  state: SessionState,
  durations: Map<string, number>,
): Promise<Array<BetaRunnableTool | BetaToolUnion>> {
  return [...(await runnerTools(deps, state, state.toolsBase ?? state.tools, durations)).values()].map(
    (t) => t.tool,
  );
}

/**
 * The tools a runner sends as `tools`, a compaction's request as a turn's: after a PATCH of `tools`, the set at create
 * (the history's tool changes take it to the current one); else the session's tools (`runnable`: its server tools).
 */
export async function toolsToSend(
  deps: RunDeps,
  state: SessionState,
  runnable: Parameters<typeof serverRunnables>[1],
  durations: Map<string, number>,
): Promise<Array<BetaRunnableTool | BetaToolUnion>> {
  return state.toolsBase
    ? baseTools(deps, state, durations)
    : [...serverRunnables(deps, runnable, durations), ...clientToolDefs(state)];
}

/** A change to tell the model, with what it does to the runner. */
export interface ToolChange {
  removed: string[];
  added: RunnerTool[];
  /** The `system` message the runner appends for it. */
  message: StoredMessage;
}

/**
 * The change the model must be told of before the next turn: from what it knows (`tools_sent`) to `tools`, and, for a
 * new runner, the server tools added by earlier runs again (see above). Null when there is none.
 */
export async function pendingToolChange(
  deps: RunDeps,
  state: SessionState,
  durations: Map<string, number>,
  newRunner: boolean,
): Promise<ToolChange | null> {
  if (state.toolsSent === null) return null;
  const sent = await runnerTools(deps, state, state.toolsSent, durations);
  const target = await runnerTools(deps, state, state.tools, durations);
  const removed = [...sent.keys()].filter((n) => !target.has(n));
  const added: RunnerTool[] = [];
  for (const [name, t] of target) {
    const before = sent.get(name);
    if (!before || JSON.stringify(before.definition) !== JSON.stringify(t.definition)) added.push(t);
  }
  if (newRunner) {
    const base = await runnerTools(deps, state, state.toolsBase ?? [], durations);
    for (const [name, t] of target)
      if ('run' in t.tool && sent.has(name) && !base.has(name) && !added.includes(t)) added.push(t);
  }
  if (removed.length === 0 && added.length === 0) return null;
  // The runner's own message for these calls: removals then additions, in the order they are made.
  const content: StoredBlock[] = [
    ...removed.map((name) => ({ type: 'tool_removal', tool: { type: 'tool_reference', name } })),
    ...added.map((t) => ({
      type: 'tool_addition',
      tool: { type: 'tool_definition', definition: t.definition },
    })),
  ];
  const message: StoredMessage = JSON.parse(JSON.stringify({ role: 'system', content }));
  return { removed, added, message };
}

/**
 * Commits the change's message (the history's next message, before the request that carries it) with `tools_sent`,
 * then tells the runner, whose next request appends that same message. `history` gets it after `before()` ran: a
 * hand-over gives the runner the history without it (the runner adds it itself).
 */
export async function applyToolChange(
  deps: RunDeps,
  run: RunHandle,
  runner: BetaToolRunner<boolean>,
  state: SessionState,
  history: StoredMessage[],
  change: ToolChange,
  before: () => void = () => {},
): Promise<void> {
  await commit(deps, run, {
    push_msgs: [JSON.stringify(change.message)],
    hset: { tools_sent: JSON.stringify(state.tools) },
    events: [
      eventOf('tools.applied', {
        message_index: history.length,
        removed: change.removed,
        // Named as `removed` names them: an added MCP toolset was `null` here (its definition has no `name`).
        added: change.added.map((t) => t.name),
      }),
    ],
  });
  state.toolsSent = state.tools;
  before();
  if (change.removed.length) runner.removeTools(...change.removed);
  if (change.added.length) runner.addTools(...change.added.map((t) => t.tool));
  history.push(change.message);
}
