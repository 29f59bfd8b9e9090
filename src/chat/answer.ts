/**
 * The answer of POST /v1/chat (spec §7.3) before it streams: the translator its stream starts with, for a post
 * (post.ts `postChat`) or for that post's replay under the same Idempotency-Key, and the record the key keeps of it
 * (`StreamReplay`); with the session's tool names every chat translation reads. routes/chat.ts streams it.
 */
import { isAgentTool } from '../schemas.js';
import { validatedSchemas } from '../engine/policy.js';
import type { ClientScope } from '../store/client-tokens.js';
import type { DecidedCall, StreamReplay } from '../store/idempotency.js';
import type { SessionState } from '../store/session-state.js';
import { ChatTranslator, type DeliveredResult } from './chunks.js';
import { statusOf, type Posted } from './post.js';
import type { ChatAsk } from './request.js';

/** The names of the session's sub-agent tools (spec §7.6): their calls are the service's, not the client's. */
export const agentsOf = (state: SessionState): Set<string> =>
  new Set(state.tools.filter(isAgentTool).map((t) => t.name));

/** The names of the session's client tools with `validate: true`: the service may refuse their calls' input. */
export const validatedOf = (state: SessionState): Set<string> => new Set(validatedSchemas(state).keys());

/** What an answer streams: after `after`, by `t`, with the session's status first when it runs nothing. */
interface ChatAnswer {
  after: string;
  t: ChatTranslator;
  status: Record<string, unknown> | null;
}

/** What an answer continues, as a post made it or its record kept it (`Posted`, `StreamReplay`). */
interface Continued {
  assistant?: string | undefined;
  known: string[];
  revision: number;
  own?: number | undefined;
  delivered?: readonly DeliveredResult[] | undefined;
  decided?: readonly DecidedCall[] | undefined;
}

/** The translator of an answer to `ask` that continues `c`, on `state`'s tools. */
function translatorOf(ask: ChatAsk, state: SessionState, c: Continued): ChatTranslator {
  const t = new ChatTranslator(c.assistant, c.known, {
    agents: agentsOf(state),
    validated: validatedOf(state),
    answered: ask.answered,
    inputs: ask.inputs,
    asking: ask.asking,
    ...(c.decided ? { decided: c.decided } : {}),
    // A user message: its post queues it after the stream's cursor (src/chat/chunks.ts `ownMessage`).
    ownMessage: ask.kind === 'message',
    ownRevision: c.own,
    // An answer to tool outputs or approvals continues a message that holds the reply that asked them.
    repliedBefore: ask.kind === 'answers',
    ...(c.delivered ? { delivered: c.delivered } : {}),
  });
  t.statusFrom = c.revision;
  return t;
}

/** The answer of a post (post.ts `postChat`). */
export function postedAnswer(ask: ChatAsk, posted: Posted): ChatAnswer {
  return { after: posted.after, t: translatorOf(ask, posted.state, posted), status: posted.status };
}

/**
 * The answer again, from the record its Idempotency-Key kept (`s`: the session now): its status the one kept, or,
 * when the record kept none (too large), the session's now.
 */
export function replayedAnswer(ask: ChatAsk, s: SessionState, replay: StreamReplay): ChatAnswer {
  const status = replay.idle ? (replay.status ?? statusOf(s) ?? null) : null;
  return { after: replay.after, t: translatorOf(ask, s, replay), status };
}

/**
 * Most bytes (UTF-8 JSON) of a status, the results and the decisions shown first, together, a chat answer's
 * idempotency record keeps (a replay of a larger status says the status then; results or decisions that do not fit
 * beside what is kept before them are not shown first again: a call approved elsewhere is then answered as approved
 * when its output comes, src/chat/chunks.ts `approvedFirst`).
 */
const KEPT_STATUS_BYTES = 65_536;

/**
 * What an Idempotency-Key keeps of a post's answer (`scopes`: those the post needed), so the same request streams it
 * again: where it streams from, and, each while it fits in KEPT_STATUS_BYTES beside those before it, its status, the
 * results and the decisions it shows first.
 */
export function streamRecord(posted: Posted, scopes: ClientScope[]): StreamReplay {
  const { status, delivered, decided } = posted;
  let room = KEPT_STATUS_BYTES;
  const fits = (value: unknown): boolean => {
    const bytes = Buffer.byteLength(JSON.stringify(value));
    if (bytes > room) return false;
    room -= bytes;
    return true;
  };
  const keptStatus = status !== null && fits(status);
  const keptDelivered = delivered.length > 0 && fits(delivered);
  const keptDecided = decided.length > 0 && fits(decided);
  return {
    after: posted.after,
    revision: posted.revision,
    ...(posted.own !== undefined ? { own: posted.own } : {}),
    assistant: posted.assistant,
    known: posted.known,
    idle: status !== null,
    ...(keptStatus && status ? { status } : {}),
    ...(keptDelivered ? { delivered } : {}),
    ...(keptDecided ? { decided } : {}),
    scopes,
  };
}
