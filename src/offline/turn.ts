/**
 * Which turn the offline model answers: the user messages at the end of the conversation (their text and tool
 * results, with the assistant message whose calls they answer), or, right after a compaction, what the summary left
 * open.
 */
import type {
  BetaMessageParam,
  BetaToolResultBlockParam,
  BetaToolUseBlockParam,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { compactionSummaryOf, readSummary } from './compaction.js';

export interface UserTurn {
  /** All text of the turn, oldest first, one block a line. */
  text: string;
  /** The last text block of the turn ('' when it has none). */
  newest: string;
  results: BetaToolResultBlockParam[];
  previousAssistant: BetaMessageParam | undefined;
}

/** The consecutive user messages at the end (system messages skipped) and the assistant message before them. */
export function lastUserTurn(messages: readonly BetaMessageParam[]): UserTurn | undefined {
  const texts: string[] = [];
  const results: BetaToolResultBlockParam[] = [];
  let i = messages.length - 1;
  let sawUser = false;
  for (; i >= 0; i--) {
    const message = messages[i]!;
    if (message.role === 'system') continue;
    if (message.role !== 'user') break;
    sawUser = true;
    const content = message.content;
    const blocks = typeof content === 'string' ? [{ type: 'text' as const, text: content }] : content;
    const ownTexts: string[] = [];
    const ownResults: BetaToolResultBlockParam[] = [];
    for (const block of blocks) {
      if (block.type === 'text' && typeof block.text === 'string') ownTexts.push(block.text);
      if (block.type === 'tool_result') ownResults.push(block);
    }
    texts.unshift(...ownTexts);
    results.unshift(...ownResults);
  }
  if (!sawUser) return undefined;
  return {
    text: texts.join('\n'),
    newest: texts.at(-1) ?? '',
    results,
    previousAssistant: i >= 0 ? messages[i] : undefined,
  };
}

/**
 * The turn a summary leaves open, when the conversation is a compaction block and nothing the user said after it:
 * the tool results not answered yet (with the calls they answer), else the request still to answer.
 */
export function turnFromSummary(messages: readonly BetaMessageParam[]): UserTurn | undefined {
  const summary = compactionSummaryOf(messages[0]);
  if (typeof summary !== 'string' || messages.some((m) => m.role === 'user')) return undefined;
  const { open, openResults } = readSummary(summary);
  if (!open && !openResults.length) return undefined;
  const calls: BetaToolUseBlockParam[] = openResults.map((r, i) => ({
    type: 'tool_use',
    id: `summary_${i}`,
    name: r.name,
    input: r.input,
  }));
  const results: BetaToolResultBlockParam[] = openResults.map((r, i) => ({
    type: 'tool_result',
    tool_use_id: `summary_${i}`,
    content: r.result,
    ...(r.isError ? { is_error: true } : {}),
  }));
  // Results answer the request they were called for: it is not planned again.
  const text = results.length ? '' : open;
  return {
    text,
    newest: text,
    results,
    previousAssistant: { role: 'assistant', content: calls },
  };
}

/** The call of `assistant` that the result `id` answers. */
export function findToolUse(
  assistant: BetaMessageParam | undefined,
  id: string,
): BetaToolUseBlockParam | undefined {
  if (!assistant || !Array.isArray(assistant.content)) return undefined;
  for (const block of assistant.content) if (block.type === 'tool_use' && block.id === id) return block;
  return undefined;
}
