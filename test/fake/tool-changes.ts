/**
 * Tool changes in the conversation (`inline-tools-2026-09-15`): `system` messages of `tool_addition` and `tool_removal`
 * blocks, checked as the API does. Each changes the tools the model may call from that point on: a removal names a
 * tool available there (declared in `tools` or added earlier), an addition carries a whole definition (a custom tool
 * needs `name` and `input_schema`) or names a tool defined before. The offline model reads the result through
 * `availableTools` (offline.ts).
 */
import type http from 'node:http';
import { invalid, unchecked } from './validate.js';
import { compactionSummaryOf, conversationStart } from '../../src/offline/compaction-block.js';

export const INLINE_TOOLS_BETA = 'inline-tools-2026-09-15';

/**
 * Checks the tool changes of a conversation and answers the tools available to the model after them (by name);
 * `opaque`: a declared tool without a name (an `mcp_toolset`), whose tools the request does not spell out.
 */
export function validateToolChanges(
  conversation: readonly unknown[],
  tools: readonly unknown[],
  headers: http.IncomingHttpHeaders,
): { available: Set<string>; opaque: boolean } {
  const available = new Set<string>();
  const defined = new Set<string>();
  let opaque = false;
  for (const t of tools) {
    const name = unchecked<'name'>(t)?.name;
    if (typeof name !== 'string') {
      opaque = true;
      continue;
    }
    available.add(name);
    defined.add(name);
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
      const tool = unchecked<'type' | 'name' | 'definition'>(block.tool);
      if (tool?.type === 'tool_reference') {
        if (typeof tool.name !== 'string') throw invalid(`${at}.tool.name: Field required`);
        if (block.type === 'tool_removal') {
          if (!available.has(tool.name))
            throw invalid(`${at}: tool_removal of \`${tool.name}\`, which is not an available tool here`);
          available.delete(tool.name);
        } else {
          if (!defined.has(tool.name))
            throw invalid(`${at}: tool_addition references \`${tool.name}\`, which was never defined`);
          available.add(tool.name);
        }
        return;
      }
      if (block.type === 'tool_removal' || tool?.type !== 'tool_definition')
        throw invalid(
          `${at}.tool.type: Input should be 'tool_reference'${block.type === 'tool_addition' ? " or 'tool_definition'" : ''}`,
        );
      const def = unchecked<'name' | 'type' | 'input_schema'>(tool.definition);
      if (!def || typeof def.name !== 'string') throw invalid(`${at}.tool.definition.name: Field required`);
      if ((def.type === undefined || def.type === 'custom') && !unchecked(def.input_schema))
        throw invalid(`${at}.tool.definition.input_schema: Field required`);
      available.add(def.name);
      defined.add(def.name);
    });
  });
  return { available, opaque };
}
