/**
 * Compaction as the Messages API does it, for the offline model and the fake: a compaction request (`compaction: {type: "summarize"}`, the
 * SDK's `compactBeforeNextTurn()`) is answered with one signed `compaction` block and `stop_reason: "compaction"`;
 * a `context_management` edit `compact_20260112` compacts when the input passes its trigger. A later request sends
 * the block back first, in place of what it summarizes; the API reads the conversation from the last compaction block
 * on, so the fake counts input tokens from there and the offline model answers from the summary.
 *
 * The summary here is extractive (the user's requests, the tool calls with their results, the assistant's last
 * words, and what is still open), bounded in size whatever the conversation, and written so that the offline model
 * (and a test's handler) can go on from it: see `readSummary()`.
 */
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { compactionSummaryOf, conversationStart, toolChangesOf } from './compaction-block.js';
import { unchecked } from './unchecked.js';
import type { FakeMessageReply } from './wire.js';

export { compactionSummaryOf, conversationStart, signSummary, toolChangesOf } from './compaction-block.js';

/** Largest summary the fake writes, in characters: a summary of a summary stays this size. */
export const SUMMARY_MAX_CHARS = 4000;

/** The compaction edit of a request's `context_management`, if it has one. */
export interface CompactionEdit {
  trigger: number;
  pauseAfter: boolean;
  instructions: string | null;
}

export function compactionEditOf(body: unknown): CompactionEdit | undefined {
  const edits = unchecked<'edits'>(unchecked<'context_management'>(body)?.context_management)?.edits;
  if (!Array.isArray(edits)) return undefined;
  for (const raw of edits) {
    const edit = unchecked<'type' | 'trigger' | 'pause_after_compaction' | 'instructions'>(raw);
    if (edit?.type !== 'compact_20260112') continue;
    const value = unchecked<'value'>(edit.trigger)?.value;
    return {
      trigger: typeof value === 'number' && value > 0 ? value : 150_000,
      pauseAfter: edit.pause_after_compaction === true,
      instructions: typeof edit.instructions === 'string' ? edit.instructions : null,
    };
  }
  return undefined;
}

/** The reply to a compaction request: the summary of the conversation in one compaction block. */
export function compactionReply(
  messages: readonly BetaMessageParam[],
  instructions: string | null,
): FakeMessageReply {
  return {
    type: 'message',
    content: [
      {
        type: 'compaction',
        content: summarize(messages, instructions),
        tool_changes: toolChangesOf(messages),
      },
    ],
    stop_reason: 'compaction',
  };
}

/* ---- the summary ---------------------------------------------------------------------------------------------- */

const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max - 3)}...` : text);
/** The start and the end of a long text (a request's question is often last). */
const clipMiddle = (text: string, max: number) =>
  text.length > max
    ? `${text.slice(0, Math.floor(max / 3))} ... ${text.slice(text.length - Math.floor((2 * max) / 3) + 5)}`
    : text;
const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();

interface ToolLine {
  id: string;
  name: string;
  input: string;
  result: string | null;
  isError: boolean;
}

function blocksOf(message: BetaMessageParam): Array<Record<string, unknown>> {
  const content: unknown = message.content;
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return Array.isArray(content)
    ? content.filter((b): b is Record<string, unknown> => typeof b === 'object' && b !== null)
    : [];
}

function resultText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '(no output)';
  return content
    .map((b) => {
      const block = unchecked<'type' | 'text'>(b);
      return block?.type === 'text' && typeof block.text === 'string'
        ? block.text
        : `[${String(block?.type)}]`;
    })
    .join(' ');
}

/** Section headers of a summary, which `readSummary()` reads back. */
const H = {
  title: 'Summary of the conversation so far',
  requests: 'The user asked (oldest first):',
  tools: 'Tool calls and their results (latest last):',
  said: 'The assistant last said:',
  open: 'Still to answer:',
  openResults: 'Tool results the assistant has not answered yet:',
  earlier: 'Before that (an earlier summary):',
  instructions: 'Summarized as instructed:',
} as const;

/**
 * An extractive summary of `messages`, at most `SUMMARY_MAX_CHARS`: the latest requests and tool results come first
 * and an earlier summary last, where a cut loses the oldest news.
 */
export function summarize(messages: readonly BetaMessageParam[], instructions: string | null): string {
  const start = conversationStart(messages);
  const earlier = start < messages.length ? compactionSummaryOf(messages[start]) : undefined;
  const requests: string[] = [];
  const tools: ToolLine[] = [];
  const byId = new Map<string, ToolLine>();
  let said = '';
  let open = '';
  let openResults: ToolLine[] = [];
  for (const message of messages.slice(earlier ? start + 1 : start)) {
    if (message.role === 'system') continue;
    const blocks = blocksOf(message);
    if (message.role === 'user') {
      const texts = blocks
        .filter((b) => b['type'] === 'text' && typeof b['text'] === 'string')
        .map((b) => String(b['text']));
      const results = blocks.filter((b) => b['type'] === 'tool_result');
      for (const r of results) {
        const line = byId.get(String(r['tool_use_id']));
        if (line) {
          line.result = oneLine(resultText(r['content']));
          line.isError = r['is_error'] === true;
        }
      }
      openResults = results.flatMap((r) => byId.get(String(r['tool_use_id'])) ?? []);
      if (texts.length) {
        const text = oneLine(texts.join(' '));
        requests.push(text);
        open = text;
      }
      continue;
    }
    // An assistant turn answers what was open, unless it only calls tools (then the results are still to answer).
    const text = oneLine(
      blocks
        .filter((b) => b['type'] === 'text' && typeof b['text'] === 'string')
        .map((b) => String(b['text']))
        .join(' '),
    );
    const calls = blocks.filter((b) => b['type'] === 'tool_use');
    for (const c of calls) {
      const line: ToolLine = {
        id: String(c['id']),
        name: String(c['name']),
        input: JSON.stringify(c['input'] ?? {}),
        result: null,
        isError: false,
      };
      tools.push(line);
      byId.set(line.id, line);
    }
    if (text) said = text;
    openResults = [];
    if (calls.length === 0 && text) open = '';
  }
  const toolLine = (t: ToolLine) =>
    `- ${t.name} ${clip(t.input, 200)} => ${t.result === null ? '(no result)' : `${t.isError ? 'ERROR ' : ''}${clip(t.result, 300)}`}`;
  const parts: string[] = [`${H.title} (${messages.length - start} messages).`];
  if (instructions && instructions.trim())
    parts.push(`${H.instructions} ${clip(oneLine(instructions), 300)}`);
  if (open) parts.push(`${H.open} ${clipMiddle(open, 600)}`);
  if (openResults.length) parts.push(H.openResults, ...openResults.slice(-10).map(toolLine));
  if (requests.length) parts.push(H.requests, ...requests.slice(-5).map((r) => `- ${clipMiddle(r, 300)}`));
  if (tools.length) {
    parts.push(`${H.tools} ${tools.length} in all.`, ...tools.slice(-8).map(toolLine));
  }
  if (said) parts.push(`${H.said} ${clip(said, 400)}`);
  let text = parts.join('\n');
  if (earlier) text += `\n${H.earlier}\n${earlier}`;
  return clip(text, SUMMARY_MAX_CHARS);
}

/** What a summary says is still to do: the open request, and tool results not answered yet. */
export interface SummaryReading {
  open: string;
  openResults: Array<{ name: string; input: unknown; result: string; isError: boolean }>;
  /** Every tool line of the summary (the latest section, then earlier ones), as written. */
  toolLines: string[];
}

/** Reads back what `summarize()` wrote (the offline model goes on from it). Scans lines; no backtracking. */
export function readSummary(summary: string): SummaryReading {
  const out: SummaryReading = { open: '', openResults: [], toolLines: [] };
  let section = '';
  let firstSummary = true;
  for (const line of summary.split('\n')) {
    if (line.startsWith(H.earlier)) firstSummary = false;
    if (line.startsWith(H.open) && firstSummary) {
      out.open = line.slice(H.open.length).trim();
      continue;
    }
    if (line.startsWith('- ')) {
      if (section === H.tools || section === H.openResults) out.toolLines.push(line);
      if (section === H.openResults && firstSummary) {
        const body = line.slice(2);
        const space = body.indexOf(' ');
        const arrow = body.indexOf(' => ');
        if (space > 0 && arrow > space) {
          let input: unknown;
          try {
            input = JSON.parse(body.slice(space + 1, arrow));
          } catch {
            input = {};
          }
          let result = body.slice(arrow + 4);
          const isError = result.startsWith('ERROR ');
          if (isError) result = result.slice(6);
          out.openResults.push({ name: body.slice(0, space), input, result, isError });
        }
      }
      continue;
    }
    section = Object.values(H).find((h) => line.startsWith(h)) ?? section;
  }
  return out;
}
