import type { StoredMessage } from '../history.js';
import type { ToolRef } from '../store/session-state.js';
import { clientTool, type ClientTool } from '../schemas.js';
import { isMcpToolset, mcpToolsetKey, type McpToolsetEntry } from '../mcp/schema.js';

/**
 * A tool change of a history: what it does, to which tool — by its key in a tool set: a tool's name, an MCP
 * toolset's `mcpToolsetKey` (the API names it by its server); null for a single MCP tool's reference, which no tool
 * set holds — and, for a toolset given whole, its definition.
 */
interface Change {
  added: boolean;
  name: string | null;
  /** An MCP toolset's server. */
  server?: string;
  toolset?: McpToolsetEntry;
}

const field = (v: unknown, k: string): unknown =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? Reflect.get(v, k) : undefined;

function changeOf(block: unknown): Change | null {
  const type = field(block, 'type');
  if (type !== 'tool_addition' && type !== 'tool_removal') return null;
  const added = type === 'tool_addition';
  const tool = field(block, 'tool');
  const definition = field(tool, 'definition');
  if (
    field(tool, 'type') === 'tool_definition' &&
    isMcpToolset(definition) &&
    typeof definition.mcp_server_name === 'string'
  )
    return {
      added,
      name: mcpToolsetKey(definition.mcp_server_name),
      server: definition.mcp_server_name,
      toolset: definition,
    };
  const server = field(tool, 'server_name');
  if (field(tool, 'type') === 'mcp_toolset_reference' && typeof server === 'string')
    return { added, name: mcpToolsetKey(server), server };
  if (field(tool, 'type') === 'mcp_tool_reference') return { added, name: null };
  const name = field(tool, 'type') === 'tool_definition' ? field(definition, 'name') : field(tool, 'name');
  return { added, name: typeof name === 'string' ? name : null };
}

/** The history's tool changes in order: a compaction's `tool_changes` stand for those of the turns it summarized. */
function changesOf(history: readonly StoredMessage[]): Change[] {
  let out: Change[] = [];
  for (const m of history) {
    if (!Array.isArray(m.content)) continue;
    const first = m.content[0];
    if (m.role === 'assistant' && field(first, 'type') === 'compaction') {
      const changes = field(first, 'tool_changes');
      out = Array.isArray(changes) ? changes.flatMap((c) => changeOf(c) ?? []) : [];
    } else if (m.role === 'system') {
      for (const b of m.content) {
        const c = changeOf(b);
        if (c) out.push(c);
      }
    }
  }
  return out;
}

/** A tool's key in a tool set (as `Change` names it); null for an entry without one (an MCP server's). */
const nameOf = (t: ToolRef): string | null => {
  if (typeof t === 'string') return t;
  if (isMcpToolset(t)) return mcpToolsetKey(t.mcp_server_name);
  return 'name' in t && typeof t.name === 'string' ? t.name : null;
};

/**
 * A tool the changes removed that `tools` no longer holds, as the set before them holds it: an MCP toolset as the
 * history last gave it whole, else as `known` declares it, else by its server alone (every tool of it, as the API
 * reads a toolset without configs); any other by its name.
 */
function restored(key: string, changes: readonly Change[], known: readonly ToolRef[]): ToolRef {
  const server = changes.find((c) => c.name === key)?.server;
  if (server === undefined) return key;
  const given = changes.findLast((c) => c.name === key && c.toolset)?.toolset;
  const declared = known.find((t) => isMcpToolset(t) && nameOf(t) === key);
  return given ?? declared ?? { type: 'mcp_toolset', mcp_server_name: server };
}

/**
 * The tool set a history was made over. A history with tool changes takes the request's `tools` to the set in
 * effect at its end, which is what a session answers as its `tools`: a session created from such a history with that
 * set (history in, history out) must send the set from before the changes as `tools`, worked back here from the
 * changes, last to first (an added tool was not there before, a removed one was). Null when the history changes no
 * tool. A removed name `tools` does not hold is taken as a tool's name (a server, tenant or memory tool: the toolbox
 * checks it as it checks `tools`), a removed MCP toolset as `restored` finds it (`known`: the definitions a caller
 * knows besides the history's); an entry without a name (an MCP server's) stays as it is.
 */
export function toolsBeforeChanges(
  tools: readonly ToolRef[],
  history: readonly StoredMessage[],
  known: readonly ToolRef[] = [],
): ToolRef[] | null {
  return walkChanges(tools, history, known, 'back');
}

/**
 * The tool set `start` becomes with a history's tool changes applied, first to last (an added tool is there after,
 * a removed one is not): what the model knows at the history's end when every request sends `start` as `tools`.
 * Null when the history changes no tool. A tool added that `start` does not hold is given by its name, an MCP toolset
 * as `restored` finds it (`known`: the definitions a caller knows besides the history's); an entry without a name
 * (an MCP server's) stays as it is.
 */
export function toolsAfterChanges(
  start: readonly ToolRef[],
  history: readonly StoredMessage[],
  known: readonly ToolRef[] = [],
): ToolRef[] | null {
  return walkChanges(start, history, known, 'forth');
}

/**
 * `tools` with the history's changes undone, last to first (`back`), or applied, first to last (`forth`): the names
 * present after the walk, those of `tools` in their order and the others as `restored` finds them. Null without
 * changes.
 */
function walkChanges(
  tools: readonly ToolRef[],
  history: readonly StoredMessage[],
  known: readonly ToolRef[],
  way: 'back' | 'forth',
): ToolRef[] | null {
  const changes = changesOf(history);
  if (changes.length === 0) return null;
  const held = new Set(tools.flatMap((t) => nameOf(t) ?? []));
  const present = new Set(held);
  for (const c of way === 'back' ? changes.toReversed() : changes) {
    if (c.name === null) continue;
    // Walking back, an added tool was not there before its addition; walking forth, it is there after it.
    if (c.added === (way === 'forth')) present.add(c.name);
    else present.delete(c.name);
  }
  const out: ToolRef[] = tools.filter((t) => {
    const n = nameOf(t);
    return n === null || present.has(n);
  });
  for (const n of present) if (!held.has(n)) out.push(restored(n, changes, known));
  return out;
}

/**
 * The definitions the history's `tool_addition`s gave (in `system` messages, or a leading compaction's
 * `tool_changes`), by name, the last of each name, as client tools (one a client tool cannot be is left out). One
 * pass over the history, whatever the number of names looked up in it.
 */
export function addedDefinitions(history: readonly StoredMessage[]): Map<string, ClientTool> {
  const found = new Map<string, ClientTool>();
  const look = (block: unknown) => {
    if (field(block, 'type') !== 'tool_addition') return;
    const tool = field(block, 'tool');
    if (field(tool, 'type') !== 'tool_definition') return;
    const d = field(tool, 'definition');
    const parsed = clientTool.safeParse({
      name: field(d, 'name'),
      description: field(d, 'description'),
      input_schema: field(d, 'input_schema'),
      strict: field(d, 'strict'),
    });
    if (parsed.success) found.set(parsed.data.name, parsed.data);
  };
  for (const m of history) {
    if (!Array.isArray(m.content)) continue;
    const first = m.content[0];
    if (m.role === 'assistant' && field(first, 'type') === 'compaction') {
      const changes = field(first, 'tool_changes');
      if (Array.isArray(changes)) changes.forEach(look);
    } else if (m.role === 'system') m.content.forEach(look);
  }
  return found;
}
