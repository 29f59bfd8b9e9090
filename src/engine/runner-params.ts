/**
 * The SDK tool runner's params, built from a session's stored shapes by one typed builder, where every SDK cast of
 * them lives: turns.ts (a runner's first params and those handed over between turns) and compaction-run.ts use it.
 */
import type { BetaToolRunnerParams } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import { sendable, type StoredMessage } from '../history.js';
import type { SessionParams } from '../schemas.js';
import { paramsFor } from './compaction.js';

/** What the runner is given each turn; the rest of its params are the session's `params`. */
export interface TurnInput {
  params: SessionParams;
  messages: StoredMessage[];
  tools: BetaToolRunnerParams['tools'];
  maxIterations: number;
  stream: boolean;
  /** `run_tools_eagerly` with streaming (see eager.ts). */
  eager: boolean;
  /** The session's code-execution container (from the last reply that named one), sent with the request. */
  container?: string | null;
}

/** `params.container` with the session's container: its id, unless the client set one. */
function withContainer(params: SessionParams, container: string | null | undefined): SessionParams {
  if (!container) return params;
  const own = params['container'];
  if (own == null) return { ...params, container };
  if (typeof own === 'object' && !('id' in own && own.id))
    return { ...params, container: { ...own, id: container } };
  return params;
}

/**
 * The runner's params: the one place where the service's stored shapes meet the SDK's request types. `params` were
 * checked by `sessionParams` (the Messages API fields a client may set, `messages`/`tools`/`stream`/`thread` refused)
 * and the history by `checkHistory` or came from the SDK's own replies; both are stored as the JSON of the SDK's
 * request shapes, which zod's looser types do not spell out.
 */
export function runnerParams(t: TurnInput): BetaToolRunnerParams & { stream: boolean } {
  const params = {
    ...paramsFor(withContainer(t.params, t.container), t.messages),
    messages: sendable(t.messages),
    // No `tools` at all rather than an empty list, as a session without tools always sent.
    ...(t.tools.length ? { tools: t.tools } : {}),
    max_iterations: t.maxIterations,
    stream: t.stream,
    runToolsEagerly: t.eager,
    // No `thread: false`: the SDK's client threads the conversation (message threads), so within a run each turn
    // sends only what the history gained since the last reply. The runner falls back to the full history by itself
    // whenever the thread cannot go on (an edited history, a lost or unsupported thread, a cut stream), so
    // correctness never depends on it. A new run continues the session's stored thread when the history still
    // extends it (src/engine/thread-anchor.ts).
  };
  // Kept cast (see above), a direct one: the compiler still checks that these params overlap the SDK's.
  return params as BetaToolRunnerParams & { stream: boolean };
}
