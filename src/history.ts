import { serverBlockProblems } from './tools/server-blocks.js';

/** A history message as stored: the request-side shape (replies are stored as `{role, content}` of the BetaMessage). */
export interface StoredMessage {
  /** `system`: a tool change (`tool_addition` / `tool_removal` blocks) the runner sent, see src/engine/tools-change.ts. */
  role: 'user' | 'assistant' | 'system';
  content: string | StoredBlock[];
}

/**
 * A content block as stored: a block of the Messages API (the SDK's, or a client's as the schemas admit it), kept as
 * it was sent or received. The fields the service reads are named; the others pass through untouched.
 */
// A type alias, not an interface: it is then a `Record<string, unknown>` too (the routes' response schemas).
export type StoredBlock = {
  type: string;
  id?: string | undefined;
  name?: string | undefined;
  input?: unknown;
  text?: string | undefined;
  tool_use_id?: string | undefined;
  content?: unknown;
  is_error?: boolean | null | undefined;
  cache_control?: unknown;
};

export interface ToolCall {
  id: string;
  name: string;
  input: unknown;
}

export interface HistoryProblem {
  index: number;
  message: string;
}

export function blocksOf(message: StoredMessage | undefined): StoredBlock[] {
  if (!message) return [];
  return typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content;
}

export function toolCallsOf(message: StoredMessage | undefined): ToolCall[] {
  if (!message || message.role !== 'assistant') return [];
  return blocksOf(message)
    .filter((b) => b.type === 'tool_use')
    .map((b) => ({ id: String(b.id), name: String(b.name), input: b.input }));
}

/**
 * A reply's content as stored: without empty or whitespace-only text blocks, which the API may answer (`""`,
 * `"\n\n"` before a call) but refuses in a request ("text content blocks must contain non-whitespace text"). A reply
 * with nothing else is stored with no content (`[]`), left out when sent.
 */
export function storedReplyContent<B extends { type: string }>(content: B[]): B[] {
  const empty = (b: B) => {
    const text = (b as { text?: unknown }).text;
    return b.type === 'text' && typeof text === 'string' && !/\S/.test(text);
  };
  return content.some(empty) ? content.filter((b) => !empty(b)) : content;
}

const isEmptyReply = (m: StoredMessage): boolean =>
  m.role === 'assistant' && Array.isArray(m.content) && m.content.length === 0;

/**
 * The history as a request carries it: replies that said nothing (content `[]`) are left out but at the very end
 * (the API refuses an empty message anywhere else; the user turns around one combine, as the API combines them).
 * The same array when there is none.
 */
export function sendable(messages: StoredMessage[]): StoredMessage[] {
  const last = messages.length - 1;
  if (!messages.some((m, i) => i < last && isEmptyReply(m))) return messages;
  return messages.filter((m, i) => i === last || !isEmptyReply(m));
}

/** The tool calls of the last message when it is an assistant turn whose calls are not answered yet. */
export function pendingToolCalls(history: StoredMessage[]): ToolCall[] {
  return toolCallsOf(history.at(-1));
}

/**
 * Checks the Messages API's rules on a history, over its turns: consecutive messages of one role are one turn (the API
 * combines them: a paused reply and its continuation, a user message after tool results), and `system` messages (the
 * tool changes the runner sent) sit between turns. The first turn is a user turn, unless the history starts with a
 * compaction's summary; every `tool_result` answers a `tool_use` of the assistant turn right before it, every
 * `tool_use` followed by a user turn is answered there exactly once, tool_use ids are unique, and tool results come
 * before other blocks of their turn. A trailing assistant turn is allowed (prefill, or calls the service answers
 * first). Server tool blocks (`server_tool_use` and its result) are checked by `serverBlockProblems`. So every
 * history the service answers (`GET …/messages`) passes.
 */
export function checkHistory(messages: readonly StoredMessage[]): HistoryProblem[] {
  const problems: HistoryProblem[] = [];
  const seen = new Set<string>();
  const turns = turnsOf(messages);
  turns.forEach((turn, t) => {
    const { index, role, blocks } = turn;
    if (t === 0 && role !== 'user' && blocks[0]?.type !== 'compaction')
      problems.push({ index, message: 'the first message must be a user turn' });
    if (role === 'assistant') {
      for (const b of blocks) {
        if (b.type !== 'tool_use') continue;
        const id = String(b.id);
        if (seen.has(id)) problems.push({ index, message: `tool_use id ${id} is used twice` });
        seen.add(id);
      }
      return;
    }
    const prev = turns[t - 1];
    const asked = new Set(
      prev?.role === 'assistant'
        ? prev.blocks.filter((b) => b.type === 'tool_use').map((b) => String(b.id))
        : [],
    );
    const answered = new Set<string>();
    let afterOther = false;
    for (const b of blocks) {
      if (b.type !== 'tool_result') {
        afterOther = true;
        continue;
      }
      if (afterOther)
        problems.push({ index, message: 'tool_result blocks must come before other content of the turn' });
      const id = String(b.tool_use_id);
      if (!asked.has(id)) {
        problems.push({
          index,
          message: `tool_result ${id} answers no tool_use of the previous assistant turn`,
        });
      } else if (answered.has(id)) {
        problems.push({ index, message: `tool_use ${id} is answered twice` });
      }
      answered.add(id);
    }
    for (const id of asked) {
      if (!answered.has(id))
        problems.push({ index, message: `tool_use ${id} of the previous assistant turn is not answered` });
    }
  });
  const serverTurns = messages.map((m) => ({ role: m.role, blocks: blocksOf(m) }));
  for (const [index, message] of serverBlockProblems(serverTurns)) problems.push({ index, message });
  return problems;
}

/** The history's turns: consecutive user or assistant messages combined, `system` messages left out. */
function turnsOf(
  messages: readonly StoredMessage[],
): Array<{ index: number; role: 'user' | 'assistant'; blocks: StoredBlock[] }> {
  const turns: Array<{ index: number; role: 'user' | 'assistant'; blocks: StoredBlock[] }> = [];
  messages.forEach((m, index) => {
    if (m.role === 'system') return;
    const last = turns.at(-1);
    if (last?.role === m.role) last.blocks.push(...blocksOf(m));
    else turns.push({ index, role: m.role, blocks: [...blocksOf(m)] });
  });
  return turns;
}

/**
 * The history as the store left it after a change that added `appended` (apply's result): a new user turn, or the
 * blocks after those of the trailing user turn. Only what was written is added; nothing is read back.
 */
export function extendHistory(
  history: StoredMessage[],
  added: { appended: StoredBlock[] | null; intoLast: boolean },
): void {
  if (!added.appended) return;
  const last = history.at(-1);
  if (added.intoLast && last)
    history[history.length - 1] = { ...last, content: [...blocksOf(last), ...added.appended] };
  else history.push({ role: 'user', content: added.appended });
}

/** Content as blocks, for merging a user turn into the one before it (roles must alternate). */
export function asBlocks(content: string | StoredBlock[]): StoredBlock[] {
  return typeof content === 'string' ? [{ type: 'text', text: content }] : content;
}
