/**
 * Message threads across runs. The SDK keeps a thread's anchor (the reply the next turn continues from) in the
 * runner's memory only; the service persists it with the session (`ThreadAnchor`: the reply's id, how many messages
 * of the history the thread holds, a digest of them and of the thread's `system` and `tools`). A new run continues
 * that thread with only the messages added since, unless the history was rewritten (fork, retry, a replaced history,
 * a compaction, an edited call, a moved cache marker): then the digest differs and the run creates a new thread, as
 * the SDK does for a rewritten history. A thread the API no longer has is replayed by the SDK itself.
 */
import { createHash, type Hash } from 'node:crypto';
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
 * `digestOf` kept up to date across the replies of one runner, hashing each message once. The digested text is the
 * JSON of `[system, tools, messages]`: its beginning (`[system,tools,[`), the messages' JSON joined by commas, then
 * `]]`; the hash of everything before the closing `]]` goes on with the messages added since the last digest, and a
 * copy of it is closed for each digest: the same bytes, so the same digest as `digestOf`.
 *
 * A runner's history only grows between its replies; a message edited in it (a moved cache marker, a merged
 * follow-up: cache-breakpoints.ts, `extendHistory`) is a new object, never changed in place. So the messages hashed
 * are known by identity: when one of them is no longer at its index (or `system`, `tools` are other objects), the
 * hash starts over.
 */
export class ThreadDigest {
  private hash: Hash | null = null;
  /** The messages the hash holds, in order. */
  private readonly hashed: StoredMessage[] = [];
  private system: unknown;
  private tools: unknown;

  of(system: unknown, tools: unknown, messages: readonly StoredMessage[]): string {
    if (this.hash === null || system !== this.system || tools !== this.tools || !this.extendedBy(messages)) {
      const head = JSON.stringify([system ?? null, Array.isArray(tools) && tools.length ? tools : null, []]);
      this.hash = createHash('sha256').update(head.slice(0, -2)); // `]]` off: `[system,tools,[`
      this.hashed.length = 0;
      this.system = system;
      this.tools = tools;
    }
    for (let i = this.hashed.length; i < messages.length; i++) {
      const m = messages[i]!;
      this.hash.update(i === 0 ? JSON.stringify(m) : `,${JSON.stringify(m)}`);
      this.hashed.push(m);
    }
    return this.hash.copy().update(']]').digest('base64url');
  }

  /** Whether `messages` begins with the messages hashed, the same objects. */
  private extendedBy(messages: readonly StoredMessage[]): boolean {
    if (messages.length < this.hashed.length) return false;
    for (let i = 0; i < this.hashed.length; i++) if (messages[i] !== this.hashed[i]) return false;
    return true;
  }
}

/**
 * The anchor a reply leaves: `history` ends with it. None for a reply the SDK does not continue from (a refusal, or
 * a reply a fallback model wrote, neither of which the API stores). `digest`: the runner's running digest.
 */
export function anchorOf(
  message: BetaMessage,
  history: readonly StoredMessage[],
  system: unknown,
  tools: unknown,
  digest: ThreadDigest,
): ThreadAnchor | null {
  if (message.stop_reason === 'refusal') return null;
  if (message.usage.iterations?.some((it) => it.type === 'fallback_message')) return null;
  return {
    id: message.id,
    stop: message.stop_reason ?? 'end_turn',
    len: history.length,
    digest: digest.of(system, tools, history),
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
