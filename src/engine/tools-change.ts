import type { BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import type { BetaToolRunner } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import {
  BETA_CLIENT_TOOL_UNION_KEYS,
  type BetaTool,
  type BetaToolUnion,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { eventOf } from '../events/schemas.js';
import type { StoredMessage } from '../history.js';
import type { SessionParams } from '../schemas.js';
import type { SessionState, ToolRef } from '../store/session-state.js';
import { runnableName, type Toolbox, type ToolScope } from '../toolbox.js';
import { anthropicToolDefinition, isAnthropicTool } from '../tools/anthropic-tools.js';
import { isMcpToolset, mcpToolsetKey } from '../mcp/schema.js';
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
 * Anthropic's MCP connector (`mcp_toolset`) is the exception both ways. Its definition has no name, so the API names
 * it by its server: a removal is `{"type": "mcp_toolset_reference", "server_name"}` (a `tool_reference` by any name is
 * refused: no tool has it), which the runner's `removeTools()` cannot write. The service writes that removal in a
 * `system` message of its own, committed and handed to the runner with the history ahead of the runner's message for
 * the rest of the change (the API runs the toolset's tools: the runner has none to stop). An addition is the
 * runner's `addTools()` of the raw definition, as the SDK sends it; an `mcp_toolset` given whole needs the
 * `mcp-client-2026-09-15` beta, which every request carries once the history may hold one (`withInlineToolsBeta`).
 *
 * The message is history like any other: committed to Redis, exactly as the runner appends it, before the request
 * that carries it, so the stored history is what the model saw and the next hand-over still extends the message
 * thread. Runners send `tools_base` (the set at create) as `tools`; `tools_sent` is what the model was told since.
 * A new runner knows only `tools_base`: a server tool added by an earlier run is added again (its runnable), so the
 * runner can run it — one more `tool_addition` of the same definition, which the API takes as a replacement.
 */

export const INLINE_TOOLS_BETA = 'inline-tools-2026-09-15';
/** The beta an `mcp_toolset` given whole in a `tool_addition` needs (the SDK's `BetaToolChangeToolDefinitionParam`). */
export const MCP_TOOLSET_CHANGES_BETA = 'mcp-client-2026-09-15';

/** What the tool changes a history holds need of a request. */
export interface HistoryChanges {
  /** A `system` turn: tool changes, which need the inline-tools beta. */
  any: boolean;
  /** A `tool_addition` of an `mcp_toolset` definition (in a `system` turn or a compaction's `tool_changes`). */
  toolsetAdded: boolean;
}

const field = (v: unknown, k: string): unknown =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? Reflect.get(v, k) : undefined;

/** Whether a block is a `tool_addition` of an `mcp_toolset` given whole. */
function addsToolset(block: unknown): boolean {
  const tool = field(block, 'tool');
  return (
    field(block, 'type') === 'tool_addition' &&
    field(tool, 'type') === 'tool_definition' &&
    isMcpToolset(field(tool, 'definition'))
  );
}

/** The tool changes of `history`, as the requests that send it need to know them (one pass). */
export function historyChanges(history: readonly StoredMessage[]): HistoryChanges {
  const out: HistoryChanges = { any: false, toolsetAdded: false };
  for (const m of history) {
    if (!Array.isArray(m.content)) continue;
    if (m.role === 'system') out.any = true;
    const blocks: unknown[] =
      m.role === 'system' ? m.content : [field(m.content[0], 'tool_changes')].flat().filter(Boolean);
    if (blocks.some(addsToolset)) out.toolsetAdded = true;
  }
  return out;
}

/** `p` with `beta` added, unless it has it. */
const withBeta = (p: SessionParams, beta: string): SessionParams =>
  p.betas?.includes(beta) ? p : { ...p, betas: [...(p.betas ?? []), beta] };

/**
 * `p` with the betas of tool changes when the request needs them: once tool changes are in the history
 * (`changes.any`: a `system` turn), or were told to the model before (`toolsSent`), every request carries the
 * inline-tools beta — a compaction's as a turn's; and the MCP one as well once an `mcp_toolset` definition is in the
 * history, or about to be (`toldOf`).
 */
export function withInlineToolsBeta(
  p: SessionParams,
  state: Pick<SessionState, 'toolsSent'>,
  changes: HistoryChanges,
): SessionParams {
  if (state.toolsSent === null && !changes.any) return p;
  const inline = withBeta(p, INLINE_TOOLS_BETA);
  return changes.toolsetAdded ? withBeta(inline, MCP_TOOLSET_CHANGES_BETA) : inline;
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
  /** An MCP toolset's server, by which the API names the toolset; null for a tool with a name. */
  server: string | null;
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
  const add = (name: string, tool: BetaRunnableTool | BetaToolUnion, server: string | null = null) =>
    out.set(name, { name, server, tool, definition: definitionOf(tool) });
  for (const tool of serverRunnables(deps, runnable, durations)) add(runnableName(tool), tool);
  for (const tool of clientToolDefs({ tools })) {
    if ('name' in tool) add(tool.name, tool);
    // Keyed as the toolbox keys it (toolbox.ts), never sent as a name: see `removalOf`.
    else if (tool.type === 'mcp_toolset')
      add(mcpToolsetKey(tool.mcp_server_name), tool, tool.mcp_server_name);
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
  /** The keys of the tools removed (their names; `mcp_toolset:<server>` for a toolset). */
  removed: string[];
  /** The names the runner's `removeTools()` is given: the removed tools but the toolsets (see above). */
  runnerRemoved: string[];
  added: RunnerTool[];
  /**
   * The `system` messages that tell it, in order: the service's own of the MCP toolsets removed (`own`), then the one
   * the runner appends for its `removeTools()` and `addTools()` (`runner`). Null for one with nothing to tell.
   */
  own: StoredMessage | null;
  runner: StoredMessage | null;
}

/** The messages of a change, as the history gets them. */
export const changeMessages = (change: ToolChange): StoredMessage[] =>
  [change.own, change.runner].filter((m): m is StoredMessage => m !== null);

/** A `tool_addition` or `tool_removal` block. */
interface ChangeBlock {
  type: 'tool_addition' | 'tool_removal';
  tool: Record<string, unknown>;
}

/** How a `tool_removal` names a tool: an MCP toolset by its server, any other tool by its name. */
function removalOf(t: RunnerTool): ChangeBlock {
  const tool =
    t.server === null
      ? { type: 'tool_reference', name: t.name }
      : { type: 'mcp_toolset_reference', server_name: t.server };
  return { type: 'tool_removal', tool };
}

/** `changes` with a change about to be told: its messages go with every request from the next on. */
export function toldOf(changes: HistoryChanges, change: ToolChange | null): void {
  if (!change) return;
  changes.any = true;
  if (change.added.some((t) => t.server !== null)) changes.toolsetAdded = true;
}

/** A `system` message of `content` as the history stores it (a copy of plain JSON); null for no content. */
const systemMessage = (content: ChangeBlock[]): StoredMessage | null =>
  content.length ? JSON.parse(JSON.stringify({ role: 'system', content })) : null;

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
  const removed = [...sent.values()].filter((t) => !target.has(t.name));
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
  const toolsets = removed.filter((t) => t.server !== null);
  const named = removed.filter((t) => t.server === null);
  return {
    removed: removed.map((t) => t.name),
    runnerRemoved: named.map((t) => t.name),
    added,
    own: systemMessage(toolsets.map(removalOf)),
    // The runner's own message for its calls: removals then additions, in the order they are made.
    runner: systemMessage([
      ...named.map(removalOf),
      ...added.map((t): ChangeBlock => ({
        type: 'tool_addition',
        tool: { type: 'tool_definition', definition: t.definition },
      })),
    ]),
  };
}

/**
 * Commits the change's messages (the history's next messages, before the request that carries them) with
 * `tools_sent`, then tells the runner, whose next request appends its own message. `history` gets the service's own
 * message before `before()` runs, which hands the history to the runner with it, and the runner's after: a hand-over
 * gives the runner the history without that one (the runner adds it itself).
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
    push_msgs: changeMessages(change).map((m) => JSON.stringify(m)),
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
  if (change.own) history.push(change.own);
  before();
  if (change.runnerRemoved.length) runner.removeTools(...change.runnerRemoved);
  if (change.added.length) runner.addTools(...change.added.map((t) => t.tool));
  if (change.runner) history.push(change.runner);
}
