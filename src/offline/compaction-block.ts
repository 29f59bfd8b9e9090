/**
 * The `compaction` block on its own: how the fake signs a summary, finds the block in a conversation, and checks one
 * sent back. Kept apart from `compaction.ts` (the summary and the request's fields) so that `validate.ts` can use it
 * without an import cycle.
 */
import { createHmac } from 'node:crypto';
import type { ToolChangeBlock } from './wire.js';

/** The key the fake signs summaries with: a block whose content was changed is refused, as by the API. */
const SIGNING_KEY = 'fake-compaction-signing-key';

export function signSummary(content: string | null): string | null {
  if (content === null) return null;
  return `fakesig_${createHmac('sha256', SIGNING_KEY).update(content).digest('base64url').slice(0, 32)}`;
}

function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? Reflect.get(value, key)
    : undefined;
}

/**
 * The summary of `message` when it is an assistant message that starts with a compaction block: the text, `null`
 * for a failed compaction (no summary), `undefined` when the message has no compaction block.
 */
export function compactionSummaryOf(message: unknown): string | null | undefined {
  const content = field(message, 'content');
  if (field(message, 'role') !== 'assistant' || !Array.isArray(content)) return undefined;
  const first: unknown = content[0];
  if (field(first, 'type') !== 'compaction') return undefined;
  const summary = field(first, 'content');
  return typeof summary === 'string' ? summary : null;
}

/**
 * The index of the message that starts what the model reads: the last message whose compaction block holds a
 * summary (a block with `content: null` is a failed compaction, which the API treats as a no-op), else 0.
 */
export function conversationStart(messages: readonly unknown[]): number {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (typeof compactionSummaryOf(messages[i]) === 'string') return i;
  }
  return 0;
}

/**
 * What is wrong with a `compaction` block at message `i`, block `j` (null when nothing): the API takes one only in an
 * assistant message, first in it, with a summary that is not empty, sent back with the signature it came with.
 */
export function compactionBlockProblem(role: string, i: number, j: number, block: unknown): string | null {
  if (role !== 'assistant') {
    return `messages.${i}.content.${j}: \`compaction\` blocks may only appear in assistant messages`;
  }
  if (j !== 0)
    return `messages.${i}.content.${j}: a \`compaction\` block must be the first block of its message`;
  const content = field(block, 'content');
  if (content === null || content === undefined) return null; // a failed compaction: a no-op
  if (typeof content !== 'string')
    return `messages.${i}.content.${j}.content: Input should be a valid string`;
  if (content.length === 0) {
    return `messages.${i}.content.${j}.content: an empty summary is not allowed (send null for none)`;
  }
  if (field(block, 'signature') !== signSummary(content)) {
    return `messages.${i}.content.${j}: the \`compaction\` block's signature does not match its content; send the block back as it was returned`;
  }
  return null;
}

/**
 * The tool changes of a compacted range, as the API computes them for the compaction block's `tool_changes`: the
 * `tool_addition` / `tool_removal` blocks that take the request's `tools` to the tool set in effect at the end of the
 * range — the last compaction's own (it stands for what came before it), then those of the `system` messages after
 * it, in order; `[]` when the range changed no tool.
 */
export function toolChangesOf(messages: readonly unknown[]): ToolChangeBlock[] {
  const start = conversationStart(messages);
  // Blocks of requests the fake (or the API) checked before: their shapes hold.
  const out: ToolChangeBlock[] = [];
  messages.slice(start).forEach((message, i) => {
    const content = field(message, 'content');
    if (!Array.isArray(content)) return;
    if (i === 0 && compactionSummaryOf(message) !== undefined) {
      const changes = field(content[0], 'tool_changes');
      if (Array.isArray(changes)) out.push(...(changes as ToolChangeBlock[]));
      return;
    }
    if (field(message, 'role') !== 'system') return;
    for (const block of content) {
      const type = field(block, 'type');
      if (type === 'tool_addition' || type === 'tool_removal') {
        const { cache_control: _c, ...rest } = block as ToolChangeBlock;
        out.push(rest);
      }
    }
  });
  return out;
}
