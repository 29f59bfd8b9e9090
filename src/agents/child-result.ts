/**
 * What a sub-agent's call is answered with once its child session has ended (spec §7.6: "its final text is the
 * call's result, `is_error` if it fails"): read by the agents' sweep (sweep.ts) when it delivers the child.
 */
import { pendingToolCalls, type StoredMessage } from '../history.js';
import type { SessionState } from '../store/session-state.js';
import type { SessionStore } from '../store/store.js';

/** What a sub-agent's call is answered with. */
export type ChildResult = { content: string; is_error: boolean };

/**
 * The stop reasons of a child that finished: the model ended its turn (spec §2.3; `pause_turn` never ends a run).
 * Any other (`max_tokens`, `refusal`, `max_iterations`, a budget, one the service does not know) answers the call
 * `is_error`.
 */
const FINISHED = new Set(['end_turn', 'stop_sequence']);

/** The last assistant message of `messages`, whether a user message follows it, and how many were read. */
function lastReply(messages: StoredMessage[]): { reply?: StoredMessage; answered: boolean; read: number } {
  let answered = false;
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === 'assistant') return { reply: m, answered, read: messages.length };
    if (m.role === 'user') answered = true;
  }
  return { answered, read: messages.length };
}

/**
 * The call's result: the child's final text — the text of its last assistant message, never an earlier turn's —
 * as a success only when the model ended its turn (`FINISHED`), or its client gave it a history ending with a
 * reply without tool calls. A child stopped for any other reason (`max_iterations`, `max_tokens`, `refusal`, a
 * budget, an unknown reason, a history given that ends with a user turn or a reply whose calls are unanswered) did
 * not finish: `is_error`, saying why, with its last text when it has one (a cut answer the parent's model may
 * still use).
 */
export async function childResult(
  store: SessionStore,
  child: SessionState,
  /** TOOL_RESULT_MAX_BYTES. */
  limit: number,
): Promise<ChildResult> {
  if (child.status === 'failed')
    return {
      content: `Error: the sub-agent failed: ${child.error?.message ?? 'unknown error'}`,
      is_error: true,
    };
  if (child.stopReason === 'cancelled')
    return { content: 'Error: the sub-agent was cancelled.', is_error: true };
  // Roles alternate in what a run writes: the last assistant message is one of the last two (a stop after a tool
  // step leaves its results, and any follow-ups merged into them, after it). Else (a history a client gave may hold
  // consecutive user messages, a tool change is a `system` message) the whole is read.
  let found = lastReply(await store.history(child.id, -2, -1));
  if (!found.reply && found.read === 2) found = lastReply(await store.history(child.id));
  const { reply } = found;
  const text = !reply
    ? ''
    : typeof reply.content === 'string'
      ? reply.content
      : reply.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('\n');
  // Bounded as every tool's result is (src/engine/tool-step.ts), before it can enter the parent's history.
  const bytes = Buffer.byteLength(text);
  // No stop reason: no run ended the child, its client replaced its history (taking it out of a review); a
  // history it gave that ends with a reply is the child's answer as its client made it — a reply without tool
  // calls: one whose calls are unanswered is a step the child did not take (`continue` would run them).
  const given =
    child.stopReason === null &&
    reply !== undefined &&
    !found.answered &&
    pendingToolCalls([reply]).length === 0;
  if (given || FINISHED.has(child.stopReason ?? '')) {
    if (!text) return { content: '(the sub-agent gave no text)', is_error: false };
    if (bytes > limit)
      return {
        content: `Error: the sub-agent's answer is ${bytes} bytes; a tool result may have at most ${limit} bytes (TOOL_RESULT_MAX_BYTES).`,
        is_error: true,
      };
    return { content: text, is_error: false };
  }
  const why = `Error: the sub-agent stopped before it finished (stop_reason ${child.stopReason ?? 'null'})`;
  if (!text) return { content: `${why}. It left no text.`, is_error: true };
  const content = `${why}. Its last text: ${text}`;
  // The bound is on the whole result (the text and what precedes it), and so is the size told.
  const total = Buffer.byteLength(content);
  if (total > limit)
    return {
      content: `${why}. Its last text would make the result ${total} bytes; a tool result may have at most ${limit} bytes (TOOL_RESULT_MAX_BYTES).`,
      is_error: true,
    };
  return { content, is_error: true };
}
