/**
 * A session's history as the AI SDK's `UIMessage[]` (GET /v1/chat/:id/messages): a user message with text, images or
 * documents (those `userPart` shows: event-shapes.ts `isUserBlock`) is a user UIMessage; the replies and tool results
 * that follow it, up to the next such user message, are one assistant UIMessage whose steps (`step-start`) are the
 * model turns. Ids are `<session id>-<index>` of the first history message each one holds (the index counts
 * compacted messages, so it is stable while the history grows). A sub-agent's call is `providerExecuted`, as in the stream (src/chat/chunks.ts): the service answers it.
 *
 * A compaction's summary (an assistant message of `compaction` blocks only) is no part of any UIMessage and ends
 * none: the live stream shows nothing of a compaction, so the replies after it continue the assistant message the
 * replies before it began (a compaction inside a run), under that message's id. A summary that comes right after a
 * user message (a compaction at a run's start, after the message the run answers: one that joined a failed tool
 * step's results, or one a failed run left; or one after a results turn a follow-up joined) stands where the
 * answer's first message was going to be when the run began: the answer is named
 * by the summary's index, the id the POST's `start` gave it (replyMessageId), not by its first reply's — also when
 * the page did not read the user message (its segment too large: `afterUser`, kept with the segment). Over the
 * record a page reads (src/chat/record.ts: the kept segments before the history), the conversation reads as the user
 * saw it.
 */
import { blocksOf, type StoredBlock, type StoredMessage } from '../history.js';
import { isSummary } from '../engine/compaction.js';
import type { RequiredAction } from '../engine/status.js';
import type { UIChunk } from './chunks.js';
import { isUserBlock, reasonOf, resultText } from './event-shapes.js';
import type { Denials } from './denials.js';

type UIPart = { type: string } & Record<string, unknown>;

interface UIMessageJson {
  id: string;
  role: 'user' | 'assistant';
  parts: UIPart[];
}

/** A field the stored block type does not name (blocks pass through as the API gave them). */
const field = (b: StoredBlock, name: string): unknown => {
  const rec: Record<string, unknown> = b;
  return rec[name];
};

/**
 * A user block as the part POST /v1/chat takes back as the same block (src/chat/request.ts `userMessageOf`): text;
 * an image or a PDF document as a `file` part with its data: (or https:) URL; a plain text document as a
 * `text/plain` file part whose data: URL holds its text (UTF-8, base64).
 */
const userPart = (b: StoredBlock): UIPart | null => {
  // Exactly the blocks event-shapes.ts `isUserBlock` names (the chat's every count of user turns is made by it): a
  // document of source `content` or `file` (REST), or an image of source `file`, has no part and shows nothing.
  if (!isUserBlock(b)) return null;
  if (b.type === 'text' && typeof b.text === 'string') return { type: 'text', text: b.text };
  const source = field(b, 'source');
  if ((b.type !== 'image' && b.type !== 'document') || typeof source !== 'object' || source === null)
    return null;
  const { type, media_type: media, data, url } = source as Record<string, unknown>;
  if (type === 'base64' && typeof media === 'string' && typeof data === 'string')
    return { type: 'file', mediaType: media, url: `data:${media};base64,${data}` };
  if (type === 'url' && typeof url === 'string')
    return { type: 'file', mediaType: b.type === 'image' ? 'image/*' : 'application/pdf', url };
  if (b.type === 'document' && type === 'text' && typeof data === 'string')
    return {
      type: 'file',
      mediaType: 'text/plain',
      url: `data:text/plain;base64,${Buffer.from(data, 'utf8').toString('base64')}`,
    };
  return null;
};

function assistantParts(
  blocks: StoredBlock[],
  calls: Map<string, UIPart>,
  agents: ReadonlySet<string>,
): UIPart[] {
  const parts: UIPart[] = [{ type: 'step-start' }];
  for (const b of blocks) {
    if (b.type === 'text' && typeof b.text === 'string')
      parts.push({ type: 'text', text: b.text, state: 'done' });
    else if (b.type === 'thinking' && typeof field(b, 'thinking') === 'string')
      parts.push({ type: 'reasoning', text: field(b, 'thinking'), state: 'done' });
    else if ((b.type === 'tool_use' || b.type === 'server_tool_use') && b.id && b.name) {
      const part: UIPart = {
        type: `tool-${b.name}`,
        toolCallId: b.id,
        state: 'input-available',
        input: b.input ?? {},
        ...(b.type === 'server_tool_use' || agents.has(b.name) ? { providerExecuted: true } : {}),
      };
      calls.set(b.id, part);
      parts.push(part);
    } else if (b.type.endsWith('_tool_result') && b.tool_use_id) {
      const part = calls.get(b.tool_use_id);
      if (part) Object.assign(part, { state: 'output-available', output: b.content ?? null });
    }
  }
  return parts;
}

/**
 * A call's part answered by its result: `output-denied` (with the denial's `approval`, as the live stream's
 * `tool-output-denied` leaves it after `addToolApprovalResponse`) for a denied call, else `output-error` /
 * `output-available`.
 */
function answer(
  part: UIPart,
  r: { content?: unknown; is_error?: boolean | null | undefined },
  denials: Denials,
) {
  const id = String(part['toolCallId']);
  if (r.is_error && denials.has(id)) {
    const reason = denials.get(id);
    Object.assign(part, {
      state: 'output-denied',
      approval: { id, approved: false, ...(reason ? { reason } : {}) },
    });
  } else if (r.is_error) Object.assign(part, { state: 'output-error', errorText: resultText(r.content) });
  else Object.assign(part, { state: 'output-available', output: r.content ?? null });
}

/** A summary and nothing else: nothing of it is shown (a reply with text beside its compaction block is). */
const summaryOnly = (m: StoredMessage): boolean =>
  isSummary(m) && blocksOf(m).every((b) => b.type === 'compaction');

/**
 * The history (from index `base` of the session's whole record) as UIMessages, the pending approvals marked;
 * `agents`: the names of the session's `agent` tools; `denials`: the denied calls (src/chat/denials.ts), whose
 * results are denials, not errors.
 */
export function toUIMessages(
  sessionId: string,
  history: StoredMessage[],
  base: number,
  action: RequiredAction | null,
  agents: ReadonlySet<string> = new Set(),
  denials: Denials = new Map(),
  /** The message before `history` (not read: src/chat/record.ts `afterUser`) is a user turn. */
  afterUser = false,
): UIMessageJson[] {
  const out: UIMessageJson[] = [];
  const calls = new Map<string, UIPart>();
  let assistant: UIMessageJson | null = null;
  // A summary right after a user message (a compaction at a run's start, or one after a results turn a follow-up
  // joined): the answer after it is named by the summary's index, the one it had when the run began.
  let afterSummary: string | null = null;
  history.forEach((m, i) => {
    const id = `${sessionId}-${base + i}`;
    if (m.role === 'system') return;
    if (summaryOnly(m)) {
      if (!assistant && (out.length > 0 ? out.at(-1)!.role === 'user' : afterUser)) afterSummary ??= id;
      return;
    }
    const blocks = blocksOf(m);
    if (m.role === 'assistant') {
      if (!assistant) {
        assistant = { id: afterSummary ?? id, role: 'assistant', parts: [] };
        afterSummary = null;
        out.push(assistant);
      }
      assistant.parts.push(...assistantParts(blocks, calls, agents));
      return;
    }
    for (const b of blocks) {
      if (b.type !== 'tool_result' || !b.tool_use_id) continue;
      const part = calls.get(b.tool_use_id);
      if (part) answer(part, b, denials);
    }
    const parts = blocks.map(userPart).filter((p): p is UIPart => p !== null);
    if (parts.length === 0) return;
    assistant = null;
    afterSummary = null;
    out.push({ id, role: 'user', parts });
  });
  // The calls of the step in progress that are answered already (a server tool that ran beside a client tool or an
  // approval): answered here as the stream answered them, so a `Chat` seeded from this page sees what it still owes.
  for (const r of action?.tool_results ?? []) {
    const part = calls.get(r.tool_use_id);
    if (part?.['state'] === 'input-available') answer(part, r, denials);
  }
  // A call denied while others of its step still wait for a decision has no result yet: it is denied all the same.
  for (const id of denials.keys()) {
    const part = calls.get(id);
    if (part?.['state'] === 'input-available') answer(part, { is_error: true }, denials);
  }
  if (action?.type === 'approve_tool_calls') {
    for (const c of action.tool_calls) {
      const part = calls.get(c.id);
      if (part?.['state'] === 'input-available')
        Object.assign(part, { state: 'approval-requested', approval: { id: c.id } });
    }
  }
  return out;
}

/**
 * The id GET /v1/chat/:id/messages gives (or, once its first reply is in, will give) the assistant message of a run in
 * progress: the history's last UIMessage when it is an assistant one (the run's replies so far, its answered pauses
 * included), else the id of the next history message (of the summary, when the history ends with a user message and
 * a compaction's summary after it). A resumed stream's `start` names it, so the AI SDK's `Chat`
 * replaces that message instead of adding a second one. (In the moment between a run's start and its merge of the
 * message that started it, the history does not hold that message yet: the id is then the previous answer's, which
 * the replay replaces until the page reloads.)
 */
export function runMessageId(
  sessionId: string,
  history: StoredMessage[],
  base: number,
  afterUser = false,
): string {
  // The id a reply after the history would be shown under (after a summary that follows the user turn: the summary's).
  const next: StoredMessage = { role: 'assistant', content: [] };
  return toUIMessages(sessionId, [...history, next], base, null, undefined, undefined, afterUser).at(-1)!.id;
}

/**
 * The id GET /v1/chat/:id/messages will give the reply to a user message posted to a session that runs nothing
 * (idle or failed): the run merges the message into a trailing user turn (`lastRole` user) or appends it, and the
 * reply comes next. The POST's `start` names it, as a resumed stream's does (runMessageId), so the AI SDK's `Chat`
 * keeps one message when a lost answer is resumed. A compaction the runs before left due (`compactsFirst`: post.ts
 * `compactsBeforeMessage`) is made first, over the history of `count` messages: its summary comes next, then the
 * message, then the reply. A compaction at the run's start after the message (one that joined a failed tool step's
 * results) puts its summary where the reply was going to be, and the page names the answer after it by the summary's
 * index (toUIMessages). (A tool change at the run's start, or a compaction without a summary, moves the index: the
 * replay then adds a message until the page reloads, as without the id.)
 */
export function replyMessageId(
  sessionId: string,
  base: number,
  count: number,
  lastRole: string | undefined,
  compactsFirst = false,
): string {
  if (compactsFirst) return `${sessionId}-${base + count + 2}`;
  return `${sessionId}-${base + count + (lastRole === 'user' ? 0 : 1)}`;
}

/**
 * The steps of the run's assistant message (`messageId`, as runMessageId names it) that the history's first `kept`
 * messages hold, as the chunks a stream of them is: a replay that starts at the run a `POST …/retry` started
 * (src/chat/run-start.ts `kept`) sends them first, as the log still holds the steps the retry dropped and the history
 * alone says which ones are left. Each step is closed (`finish-step`), so the replay's first turn opens its own. None
 * when those messages end with no part of that message (the retry dropped all its steps).
 */
export function keptSteps(
  sessionId: string,
  history: StoredMessage[],
  base: number,
  kept: number,
  messageId: string,
  agents: ReadonlySet<string>,
  denials: Denials = new Map(),
  afterUser = false,
): UIChunk[] {
  const last = toUIMessages(sessionId, history.slice(0, kept), base, null, agents, denials, afterUser).at(-1);
  if (last?.role !== 'assistant' || last.id !== messageId) return [];
  const out: UIChunk[] = [];
  last.parts.forEach((p, i) => {
    // Ids of their own: the replay's are `<iteration>-<block index>` (src/chat/chunks.ts).
    const id = `kept-${i}`;
    if (p.type === 'step-start') {
      if (out.length > 0) out.push({ type: 'finish-step' });
      out.push({ type: 'start-step' });
    } else if (p.type === 'text' || p.type === 'reasoning') {
      const text = p['text'];
      out.push({ type: `${p.type}-start`, id });
      if (typeof text === 'string' && text !== '') out.push({ type: `${p.type}-delta`, id, delta: text });
      out.push({ type: `${p.type}-end`, id });
    } else if (p.type.startsWith('tool-')) {
      const toolCallId = p['toolCallId'];
      const service = p['providerExecuted'] === true ? { providerExecuted: true } : {};
      const call = { toolCallId, toolName: p.type.slice('tool-'.length), input: p['input'], ...service };
      out.push({ type: 'tool-input-available', ...call });
      if (p['state'] === 'output-available')
        out.push({ type: 'tool-output-available', toolCallId, output: p['output'], ...service });
      else if (p['state'] === 'output-error')
        out.push({ type: 'tool-output-error', toolCallId, errorText: p['errorText'], ...service });
      // As the live stream showed it: the approval asked, answered (the part's `approval` gets `approved: false`,
      // which the ai package's schema requires of an `output-denied` part), then denied.
      else if (p['state'] === 'output-denied') {
        const approval = p['approval'] as { reason?: unknown } | undefined;
        out.push(
          { type: 'tool-approval-request', approvalId: toolCallId, toolCallId },
          {
            type: 'tool-approval-response',
            approvalId: toolCallId,
            approved: false,
            ...reasonOf(approval?.reason),
          },
          { type: 'tool-output-denied', toolCallId },
        );
      }
    }
  });
  if (out.length > 0) out.push({ type: 'finish-step' });
  return out;
}

/** The text of a UIMessage's text parts, joined (how a client's user message is matched with the history's). */
export const textOfParts = (parts: ReadonlyArray<{ type: string } & Record<string, unknown>>): string =>
  parts
    .filter((p) => p.type === 'text' && typeof p['text'] === 'string')
    .map((p) => p['text'] as string)
    .join('')
    .trim();

/**
 * `regenerate-message`: how many messages of the history (from index `base`) stay when its newest answer is made
 * again — everything before that answer's first message (all of it when the newest turn has no answer yet). Only the
 * newest: the client's view must end with the same user turn (`clientText`, its text), and `messageId`, when given,
 * must name that turn, its answer, or the client's own id of it (`clientId`). Null otherwise: the history moved on
 * (another tab posted) or an older answer was named, and cutting there would drop turns the client still shows.
 */
export function keptBeforeNewestAnswer(
  sessionId: string,
  history: StoredMessage[],
  base: number,
  view: { clientText: string; clientId: string; messageId: string | undefined },
): number | null {
  const ui = toUIMessages(sessionId, history, base, null);
  const answer = ui.at(-1)?.role === 'assistant' ? ui.at(-1) : undefined;
  const question = answer ? ui.at(-2) : ui.at(-1);
  if (question?.role !== 'user' || textOfParts(question.parts) !== view.clientText) return null;
  const named = [question.id, view.clientId, ...(answer ? [answer.id] : [])];
  if (view.messageId !== undefined && !named.includes(view.messageId)) return null;
  // Ids are `<session id>-<index>` (toUIMessages): the answer's first message.
  return answer ? Number(answer.id.slice(sessionId.length + 1)) - base : history.length;
}
