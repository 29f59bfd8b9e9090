/**
 * Message threads across runs. The SDK keeps a thread's anchor (the reply the next turn continues from) in the
 * runner's memory only; the service persists it with the session (`ThreadAnchor`: the reply's id, how many messages
 * of the history the thread holds, a digest of them and of the thread's `system` and `tools`). A new run continues
 * that thread with only the messages added since, unless the history was rewritten (fork, retry, a replaced history,
 * a compaction, an edited call, a moved cache marker): then the digest differs and the run creates a new thread, as
 * the SDK does for a rewritten history. A thread the API no longer has is replayed by the SDK itself.
 */
import { createHash } from 'node:crypto';
import type { ModelClient } from '../model-client.js';
import type { BetaMessageThread } from '@anthropic-ai/sdk/lib/threads/BetaMessageThread';
import type {
  BetaToolRunner,
  BetaToolRunnerParams,
  BetaToolRunnerRequestOptions,
} from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { StoredMessage } from '../history.js';
import type { ThreadAnchor } from '../store/session-state.js';

/** A digest of what a thread holds: its create-only fields (`system`, `tools`) and messages. */
function digestOf(system: unknown, tools: unknown, messages: readonly StoredMessage[]): string {
  return (
    createHash('sha256')
      // No tools and an empty list are the same request (runner-params.ts sends no `tools` then).
      .update(JSON.stringify([system ?? null, Array.isArray(tools) && tools.length ? tools : null, messages]))
      .digest('base64url')
  );
}

/**
 * The anchor a reply leaves: `history` ends with it. None for a reply the SDK does not continue from (a refusal, or
 * a reply a fallback model wrote, neither of which the API stores).
 */
export function anchorOf(
  message: BetaMessage,
  history: readonly StoredMessage[],
  system: unknown,
  tools: unknown,
): ThreadAnchor | null {
  if (message.stop_reason === 'refusal') return null;
  if (message.usage.iterations?.some((it) => it.type === 'fallback_message')) return null;
  return {
    id: message.id,
    stop: message.stop_reason ?? 'end_turn',
    len: history.length,
    digest: digestOf(system, tools, history),
  };
}

/** Whether `anchor`'s thread holds the start of `history` as it is now (with these `system` and `tools`). */
function holds(
  anchor: ThreadAnchor,
  history: readonly StoredMessage[],
  system: unknown,
  tools: unknown,
): boolean {
  return (
    anchor.len > 0 &&
    anchor.len <= history.length &&
    history[anchor.len - 1]?.role === 'assistant' &&
    digestOf(system, tools, history.slice(0, anchor.len)) === anchor.digest
  );
}

/**
 * The methods of a thread's state (the SDK's `ThreadState`, kept internal as `_state`) that record a reply: the one way
 * to seed a thread with an anchor it did not receive itself.
 */
interface ThreadStateTurns {
  startTurn(messages: [], fields: Record<string, never>): object;
  recordReply(turn: object, message: BetaMessage): void;
  endTurn(turn: object): void;
}
const stateOf = (thread: BetaMessageThread<unknown>): ThreadStateTurns =>
  (thread as unknown as { _state: ThreadStateTurns })._state;

/**
 * The run's tool runner: over the session's thread, continued from `anchor`, when it still holds the history;
 * otherwise the SDK's own (a new thread with the whole history).
 */
export function startRunner(
  client: ModelClient,
  params: BetaToolRunnerParams & { stream: boolean },
  options: BetaToolRunnerRequestOptions,
  anchor: ThreadAnchor | null,
): BetaToolRunner<boolean> {
  const history = params.messages as StoredMessage[];
  if (!anchor || !holds(anchor, history, params.system, params.tools)) {
    return client.beta.messages.toolRunner(params, options);
  }
  const { stream, max_iterations, runToolsEagerly, thread: _t, ...fields } = params;
  // Copies, as the SDK's runner makes of the messages it is given.
  const messages: BetaToolRunnerParams['messages'] = JSON.parse(JSON.stringify(params.messages));
  let thread: BetaMessageThread<unknown>;
  try {
    thread = client.beta.messages.thread({
      ...fields,
      messages: messages.slice(0, anchor.len - 1),
      unsupportedRequestBehavior: 'continue_unthreaded',
    });
  } catch {
    // A client without message threads (another provider's): the SDK's runner, unthreaded.
    return client.beta.messages.toolRunner(params, options);
  }
  // The thread records the anchor reply as it does a reply it received: the next turn continues from it.
  const state = stateOf(thread);
  const turn = state.startTurn([], {});
  const reply = messages[anchor.len - 1]!;
  // Only the fields the thread reads of a reply: its id, content, stop reason and usage.
  const received = {
    id: anchor.id,
    type: 'message',
    role: 'assistant',
    content: reply.content,
    stop_reason: anchor.stop,
    usage: {},
    container: null,
  } as unknown as BetaMessage;
  state.recordReply(turn, received);
  state.endTurn(turn);
  thread.append(...messages.slice(anchor.len));
  return thread.toolRunner({ stream, max_iterations, runToolsEagerly }, options);
}
