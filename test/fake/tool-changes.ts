/**
 * Tool changes in the conversation (`inline-tools-2026-09-15`): `system` messages of `tool_addition` and `tool_removal`
 * blocks, checked as the API does. Each changes the tools the model may call from that point on: a removal names a
 * tool available there (declared in `tools` or added earlier), an addition carries a whole definition (a custom tool
 * needs `name` and `input_schema`) or names a tool defined before. An MCP toolset (Anthropic's MCP connector) has no
 * name: it is named by its server, `{"type": "mcp_toolset_reference", "server_name"}`, and never by a `tool_reference`
 * (the API has no tool of that name); its definition in a `tool_addition` needs the `mcp-client-2026-09-15` beta and
 * a server of the request's `mcp_servers`. The offline model reads the result through `availableTools` (offline.ts).
 */
import type http from 'node:http';
import { invalid, unchecked } from './validate.js';
import { compactionSummaryOf, conversationStart } from '../../src/offline/compaction-block.js';

export const INLINE_TOOLS_BETA = 'inline-tools-2026-09-15';
/** The beta an `mcp_toolset` given in a `tool_addition` needs. */
export const MCP_TOOLSET_CHANGES_BETA = 'mcp-client-2026-09-15';

/**
 * Checks the tool changes of a conversation and answers the tools available to the model after them (by name);
 * `opaque`: a declared tool without a name (an `mcp_toolset`), whose tools the request does not spell out.
 */
/** The tools of one point of a conversation: by name, and MCP toolsets by server name. */
interface ToolSet {
  available: Set<string>;
  defined: Set<string>;
  toolsets: Set<string>;
  definedToolsets: Set<string>;
}

/** The names of the request's `mcp_servers` (validateBody checked their shape). */
export function mcpServerNamesOf(raw: unknown): Set<string> {
  const servers = Array.isArray(raw) ? raw : [];
  return new Set(
    servers.flatMap((s: unknown) => {
      const name = unchecked<'name'>(s)?.name;
      return typeof name === 'string' ? [name] : [];
    }),
  );
}

/**
 * Checks the tool changes of a conversation and answers the tools available to the model after them (by name);
 * `opaque`: an MCP toolset is available, whose tools the request does not spell out.
 */
export function validateToolChanges(
  conversation: readonly unknown[],
  tools: readonly unknown[],
  headers: http.IncomingHttpHeaders,
  mcpServers: ReadonlySet<string> = new Set(),
): { available: Set<string>; opaque: boolean } {
  const set: ToolSet = {
    available: new Set(),
    defined: new Set(),
    toolsets: new Set(),
    definedToolsets: new Set(),
  };
  for (const t of tools) {
    const tool = unchecked<'name' | 'type' | 'mcp_server_name'>(t);
    if (tool?.type === 'mcp_toolset' && typeof tool.mcp_server_name === 'string') {
      set.toolsets.add(tool.mcp_server_name);
      set.definedToolsets.add(tool.mcp_server_name);
    }
    if (typeof tool?.name !== 'string') continue;
    set.available.add(tool.name);
    set.defined.add(tool.name);
  }
  const betas = String(headers['anthropic-beta'] ?? '')
    .split(',')
    .map((b) => b.trim());
  // The API reads the conversation from its last compaction on: the block's `tool_changes` stand for the `system`
  // messages of the turns it summarized.
  const start = conversationStart(conversation);
  conversation.forEach((raw, i) => {
    if (i < start) return;
    const message = unchecked<'role' | 'content'>(raw);
    if (!Array.isArray(message?.content)) return;
    let blocks: unknown[] = message.content;
    let where = (j: number) => `messages.${i}.content.${j}`;
    if (i === start && compactionSummaryOf(raw) !== undefined) {
      const changes = unchecked<'tool_changes'>(blocks[0])?.tool_changes;
      blocks = Array.isArray(changes) ? changes : [];
      where = (j) => `messages.${i}.content.0.tool_changes.${j}`;
    } else if (message?.role !== 'system') return;
    blocks.forEach((rawBlock: unknown, j: number) => {
      const block = unchecked<'type' | 'tool'>(rawBlock);
      if (block?.type !== 'tool_addition' && block?.type !== 'tool_removal') return;
      const at = where(j);
      if (!betas.includes(INLINE_TOOLS_BETA))
        throw invalid(
          `${at}: \`${block.type}\` requires the \`anthropic-beta: ${INLINE_TOOLS_BETA}\` header`,
        );
      applyChange(set, block.type === 'tool_addition', block.tool, at, { betas, mcpServers });
    });
  });
  return { available: set.available, opaque: set.toolsets.size > 0 };
}

/** What a toolset's definition in a `tool_addition` is checked against. */
interface Context {
  betas: readonly string[];
  mcpServers: ReadonlySet<string>;
}

/** One `tool_addition` (`added`) or `tool_removal` of `raw`, checked as the API does and applied to `set`. */
function applyChange(set: ToolSet, added: boolean, raw: unknown, at: string, ctx: Context): void {
  const tool = unchecked<'type' | 'name' | 'server_name' | 'definition'>(raw);
  if (tool?.type === 'tool_reference') {
    if (typeof tool.name !== 'string') throw invalid(`${at}.tool.name: Field required`);
    if (!added) {
      if (!set.available.has(tool.name))
        throw invalid(`${at}: tool_removal of \`${tool.name}\`, which is not an available tool here`);
      set.available.delete(tool.name);
    } else {
      if (!set.defined.has(tool.name))
        throw invalid(`${at}: tool_addition references \`${tool.name}\`, which was never defined`);
      set.available.add(tool.name);
    }
    return;
  }
  if (tool?.type === 'mcp_toolset_reference') return applyToolsetReference(set, added, tool.server_name, at);
  if (!added || tool?.type !== 'tool_definition')
    throw invalid(
      `${at}.tool.type: Input should be 'tool_reference'${added ? ", 'mcp_toolset_reference' or 'tool_definition'" : " or 'mcp_toolset_reference'"}`,
    );
  const def = unchecked<'name' | 'type' | 'input_schema' | 'mcp_server_name'>(tool.definition);
  if (def?.type === 'mcp_toolset') return addToolsetDefinition(set, def.mcp_server_name, at, ctx);
  if (!def || typeof def.name !== 'string') throw invalid(`${at}.tool.definition.name: Field required`);
  if ((def.type === undefined || def.type === 'custom') && !unchecked(def.input_schema))
    throw invalid(`${at}.tool.definition.input_schema: Field required`);
  set.available.add(def.name);
  set.defined.add(def.name);
}

/** An MCP toolset named by its server: a removal of one available there, an addition of one defined before. */
function applyToolsetReference(set: ToolSet, added: boolean, server: unknown, at: string): void {
  if (typeof server !== 'string') throw invalid(`${at}.tool.server_name: Field required`);
  if (!added) {
    if (!set.toolsets.has(server))
      throw invalid(`${at}: tool_removal of the MCP toolset \`${server}\`, which is not available here`);
    set.toolsets.delete(server);
    return;
  }
  if (!set.definedToolsets.has(server))
    throw invalid(`${at}: tool_addition references the MCP toolset \`${server}\`, which was never defined`);
  set.toolsets.add(server);
}

/** An `mcp_toolset` given whole in a `tool_addition`: only with its beta, for a server of `mcp_servers`. */
function addToolsetDefinition(set: ToolSet, server: unknown, at: string, ctx: Context): void {
  if (!ctx.betas.includes(MCP_TOOLSET_CHANGES_BETA))
    throw invalid(
      `${at}.tool.definition: an \`mcp_toolset\` definition requires the \`anthropic-beta: ${MCP_TOOLSET_CHANGES_BETA}\` header`,
    );
  if (typeof server !== 'string' || !ctx.mcpServers.has(server))
    throw invalid(`${at}.tool.definition.mcp_server_name: ${String(server)} is not a server of mcp_servers`);
  set.toolsets.add(server);
  set.definedToolsets.add(server);
}
