/**
 * What POST /v1/chat posts to its session (spec §7.3): the newest UIMessage as a user message, or as the answers
 * (approval responses, tool outputs) an assistant message holds for the calls the session waits on; and where the
 * answer's stream starts. The mutations are the REST routes' own (src/sessions/); routes/chat.ts streams the answer.
 */
import { badRequest, conflict } from '../errors.js';
import { keptBeforeNewestAnswer, replyMessageId, textOfParts } from './history.js';
import { requiredAction } from '../engine/status.js';
import { addMessage } from '../sessions/messages.js';
import { rerunFrom } from '../sessions/replace.js';
import type { MutationResult, SessionDeps } from '../sessions/mutate.js';
import { decide, submitResults } from '../sessions/tool-calls.js';
import { AlreadyPosted } from '../store/apply-ops.js';
import type { ClientScope } from '../store/client-tokens.js';
import type { SessionState } from '../store/session-state.js';
import { pendingToolCalls, type StoredMessage } from '../history.js';
import { dueAtStart, endsPaused } from '../engine/compaction.js';
import type { DeliveredResult } from './chunks.js';
import type { DecidedCall } from '../store/idempotency.js';
import type { EventLog } from '../store/events.js';
import { START } from '../events/cursor.js';
import {
  type ChatAsk,
  type ChatMessage,
  answeredCallIdsOf,
  approvalsAskedOf,
  clientCallsAwaiting,
  decisionsOf,
  editRefused,
  postedGuard,
  resultsOf,
  toolCallIdsOf,
  userMessageOf,
} from './request.js';

/** Who posts: the tenant, the actor of a client token, and the scope check each part of the message needs. */
export interface Poster {
  deps: SessionDeps;
  tenant: string;
  by: string | undefined;
  need: (scope: ClientScope) => void;
  /** The request's If-Match (routes/mutations.ts resolveIfMatch): the revision its first write must be made at. */
  ifMatch: number | undefined;
}

/** What a post did: where its answer streams from, and what that answer continues. */
export interface Posted {
  after: string;
  revision: number;
  /**
   * The revision of the write that queued the request's own user message: its `message.queued` event has it, which
   * tells it from another client's queued after `after` (src/chat/chunks.ts `ownRevision`). Unknown (undefined) when
   * the post was answered from a record that kept none.
   */
  own?: number | undefined;
  /** The revision the request's last write made; absent when nothing was written now (the same post again). */
  wrote?: number | undefined;
  /** The assistant message the request's answers were in (its stream continues it). */
  assistant: string | undefined;
  /** The tool call ids of that message. */
  known: string[];
  /** The session after the post, and its status when it runs nothing (else null). */
  state: SessionState;
  status: Record<string, unknown> | null;
  /**
   * Results of the step's tenant tool calls that the message answered does not show: delivered while the session
   * waited for its client, after the stream that asked it had ended (`deliveredMeanwhile`). The answer shows them
   * first.
   */
  delivered: DeliveredResult[];
  /**
   * Decisions made elsewhere on calls whose approval the message answered shows asked and unanswered
   * (`decidedMeanwhile`): the answer shows them first.
   */
  decided: DecidedCall[];
}

/** The `session.status` data of a session that runs nothing; null when it runs. */
export function statusOf(state: SessionState): Record<string, unknown> | null {
  if (state.status === 'running') return null;
  return {
    status: state.status,
    required_action: requiredAction(state.status, state.pending),
    stop_reason: state.stopReason,
    error: state.error,
  };
}

/**
 * Whether the run a user message starts (the session idle or failed, its history ending with `tail`) makes a
 * compaction first, the message following its summary (src/engine/run.ts `step`): one the runs before left due,
 * unless the run answers a failed tool step first (the message joins its results) or resumes a paused reply.
 */
async function compactsBeforeMessage(
  store: SessionDeps['store'],
  s: SessionState,
  tail: StoredMessage | null,
): Promise<boolean> {
  if (!tail || pendingToolCalls([tail]).length > 0) return false;
  if ((await dueAtStart(store, s, s.msgCount, tail)) === null) return false;
  return !(await endsPaused(store, s, tail));
}

/**
 * Posts what the body asks (`ask.kind`) to `s`, the session as the request read it; the answer streams from the log's
 * newest event as read now (`log`). `keyed`: the deps with the request's Idempotency-Key token, for a regenerate;
 * `seesRun`: the caller may see the run (routes/chat.ts `withoutRun`).
 */
export async function postChat(
  p: Poster,
  s: SessionState,
  ask: ChatAsk,
  via: { log: Pick<EventLog, 'lastId'>; keyed: SessionDeps; seesRun: boolean },
): Promise<Posted> {
  const { id, last } = ask;
  // A message that starts a run: the id its reply will have, from the history's tail read before the run can
  // merge the message (for a caller that sees the run: withoutRun names only the client's own message). Read
  // with the log's newest id, in one round trip.
  const startsRun = ask.kind === 'message' && (s.status === 'idle' || s.status === 'failed') && via.seesRun;
  const [newest, tail] = await Promise.all([
    via.log.lastId(id),
    startsRun ? p.deps.store.lastMessage(id) : null,
  ]);
  const after = newest ?? START;
  const replyId = startsRun
    ? replyMessageId(
        id,
        s.msgBase,
        s.msgCount,
        tail?.role,
        await compactsBeforeMessage(p.deps.store, s, tail),
      )
    : undefined;
  if (ask.kind === 'regenerate')
    // With the request's Idempotency-Key token: a retry after a lost answer does not cut and run twice.
    return regenerate({ ...p, deps: via.keyed }, id, ask.messages, ask.messageId, after);
  if (ask.kind === 'message') return postUserMessage(p, id, last, after, replyId);
  return postAnswers(p, s, last, after);
}

/**
 * Posts the newest message, a user's (its stream starts `after`); the same message sent again posts nothing and
 * answers from where the first one's answer streamed. `replyId`: the id its reply will have, when it starts a run
 * (history.ts replyMessageId).
 */
async function postUserMessage(
  p: Poster,
  id: string,
  last: ChatMessage,
  after: string,
  replyId: string | undefined,
): Promise<Posted> {
  p.need('message');
  const body = userMessageOf(last.parts);
  // A message without an id cannot be told from another: it is posted, unguarded.
  const guard = last.id === '' ? undefined : postedGuard(last.id, body, after);
  try {
    const { state, wrote } = await addMessage(p.deps, p.tenant, id, body, p.ifMatch, p.by, guard);
    return {
      after,
      revision: state.revision,
      own: wrote,
      wrote,
      // Only when this message started the run: queued behind one, its reply's place is not known yet.
      assistant: state.status === 'running' ? replyId : undefined,
      known: [],
      state,
      status: statusOf(state),
      delivered: [],
      decided: [],
    };
  } catch (err) {
    if (!(err instanceof AlreadyPosted)) throw err;
    if (err.entry.fp !== guard?.fp) throw editRefused(last.id);
    // The same message again (its first answer was lost with its replica): nothing is posted. Its answer streams
    // from the first one's cursor, and its own message is the one that post's write (`rev`) queued.
    const { after: from, rev, idle } = err.entry;
    const state = await p.deps.store.loadFor(p.tenant, id);
    const status = idle ? statusOf(state) : null;
    return {
      after: from,
      revision: rev,
      own: rev,
      assistant: undefined,
      known: [],
      state,
      status,
      delivered: [],
      decided: [],
    };
  }
}

/**
 * Applies the approval responses and tool outputs of the newest message, an assistant's, that `s` waits for. The
 * outputs of client calls that wait for no decision go in first: the last decision of a step starts it, and an
 * output the client gave beside it (its tool ran at `tool-input-available`, before the user approved the other call)
 * must be there by then, or the step would wait for a result the client already sent. Every scope the message needs
 * is checked before anything is applied.
 */
async function postAnswers(p: Poster, s: SessionState, last: ChatMessage, after: string): Promise<Posted> {
  let result: MutationResult | undefined;
  // The reads the request's writes were planned from, each after the stream's cursor (`after`) was read.
  const reads: SessionState[] = [];
  const note = (r: MutationResult) => {
    if (r.read) reads.push(r.read);
    return r;
  };
  // The request's If-Match pins its first write; the others follow from it.
  let ifMatch = p.ifMatch;
  const pinned = () => {
    const rev = ifMatch;
    ifMatch = undefined;
    return rev;
  };
  const decisions = decisionsOf(last.parts, requiredAction(s.status, s.pending));
  const early = decisions.length ? resultsOf(last.parts, clientCallsAwaiting(s)) : [];
  if (decisions.length) p.need('decide');
  const approved = new Set(decisions.flatMap((d) => (d.body.decision === 'approve' ? [d.toolUseId] : [])));
  if (decisions.length && resultsOf(last.parts, clientCallsAwaiting(s, approved)).length) p.need('results');
  if (early.length) result = note(await submitResults(p.deps, p.tenant, s.id, early, true, pinned()));
  for (const d of decisions)
    result = note(await decide(p.deps, p.tenant, s.id, d.toolUseId, d.body, pinned(), p.by));
  const now = result?.state ?? s;
  const results = resultsOf(last.parts, clientCallsAwaiting(now));
  if (results.length) {
    p.need('results');
    result = note(await submitResults(p.deps, p.tenant, s.id, results, true, pinned()));
  }
  if (!result)
    throw badRequest(
      'The newest message holds no user text, and no approval response or tool output the session waits for.',
    );
  const { state } = result;
  const known = toolCallIdsOf(last.parts);
  const delivered = deliveredMeanwhile([s, ...reads, state], answeredCallIdsOf(last.parts));
  const decided = decidedMeanwhile([s, ...reads, state], approvalsAskedOf(last.parts));
  return {
    after,
    revision: state.revision,
    wrote: result.wrote,
    assistant: last.id,
    known,
    state,
    status: statusOf(state),
    delivered,
    decided,
  };
}

/**
 * The results of tenant tool calls (tool tasks) on the pending step of `states` (the session as the request first
 * read it, as each of its writes was planned from, and after them) that the client's message does not show
 * (`shown`): a task queued while the client was asked (src/engine/tool-step.ts) whose result came after the stream
 * that asked had ended. Its `tool.completed` is in the log before the answer's cursor, so the answer would never show
 * it. The request's first read comes before the cursor's, so a result delivered between the two is not in it; the
 * reads its writes were planned from (`MutationResult.read`) come after the cursor and before the run the last write
 * starts, so the step is whole in them and every result delivered before the cursor is there (the session after the
 * writes may have lost the step already: the run wrote the results). A result delivered after the cursor was read
 * is in the stream too: the translator shows it once (chunks.ts).
 */
function deliveredMeanwhile(states: SessionState[], shown: ReadonlySet<string>): DeliveredResult[] {
  const out = new Map<string, DeliveredResult>();
  for (const st of states)
    for (const c of st.pending?.turn ? [] : (st.pending?.calls ?? [])) {
      if (!c.runner || !c.result || c.approval === 'denied' || shown.has(c.id) || out.has(c.id)) continue;
      out.set(c.id, {
        tool_use_id: c.id,
        name: c.name,
        input: c.input,
        content: c.result.content,
        is_error: c.result.is_error,
      });
    }
  return [...out.values()];
}

/**
 * The decisions on the calls of `asked` (those the client's message shows with an approval asked and unanswered) that
 * the pending step of `states` holds (the session as the request first read it, as each of its writes was planned
 * from, and after them): made elsewhere (REST, the WebSocket, another tab, an action's timeout) — the message itself
 * answers none of them. A decision made before the answer's cursor is not in its stream, and the Chat's part would
 * end `output-*` with an approval without `approved`, which the `ai` package's schema refuses: the answer shows them
 * first (chunks.ts `decidedFirst`). The request's first read comes before the cursor's, and the reads its writes were
 * planned from after it, so every decision made before the cursor is in one of them (the step is whole in them: the
 * run that takes it starts with the last write); one made after the cursor may be too, and the translator answers
 * it once. An approval's `input` is the call's as it runs (its edit, if any); its `result`, the call's when it ran
 * already (a server call runs once the step's decisions are in, while the step still waits for a client's result:
 * its `tool.completed` is before the cursor too).
 */
function decidedMeanwhile(states: SessionState[], asked: ReadonlySet<string>): DecidedCall[] {
  const out = new Map<string, DecidedCall>();
  if (asked.size === 0) return [];
  for (const st of states)
    for (const c of st.pending?.turn ? [] : (st.pending?.calls ?? [])) {
      // The later read over the earlier: a decision stays as made, but its call may have run since.
      if (!asked.has(c.id)) continue;
      if (c.approval === 'approved')
        out.set(c.id, {
          tool_use_id: c.id,
          name: c.name,
          approved: true,
          input: c.input,
          ...(c.result ? { result: { content: c.result.content, is_error: c.result.is_error } } : {}),
        });
      else if (c.approval === 'denied')
        out.set(c.id, {
          tool_use_id: c.id,
          name: c.name,
          approved: false,
          ...(c.reason ? { reason: c.reason } : {}),
        });
    }
  return [...out.values()];
}

/**
 * `trigger: "regenerate-message"` (the AI SDK's `regenerate()`): the session's newest answer is dropped and the
 * session runs again from the user turn before it (sessions/replace.ts `rerunFrom`). The client's list, which the
 * `Chat` cut back itself, must end with that user turn: an older answer, or a view the history has moved past, is 409
 * `nothing_to_retry` and nothing is cut. The reply takes the dropped answer's id, so the `Chat` gets its message
 * back by the same id. Needs the `message` scope, as a message does.
 */
async function regenerate(
  p: Poster,
  id: string,
  messages: ChatMessage[],
  messageId: string | undefined,
  after: string,
): Promise<Posted> {
  p.need('message');
  const last = messages.at(-1)!;
  if (last.role !== 'user')
    throw badRequest('A regenerate request ends with the user message whose answer is made again.');
  const view = { clientText: textOfParts(last.parts), clientId: last.id, messageId };
  let assistant: string | undefined;
  const pick = (history: StoredMessage[], s: SessionState) => {
    const kept = keptBeforeNewestAnswer(id, history, s.msgBase, view);
    if (kept === null)
      throw conflict(
        'nothing_to_retry',
        "Only the session's newest answer can be made again, and this chat does not end with its question: load " +
          `the chat again (GET /v1/chat/${id}/messages).`,
      );
    assistant = replyMessageId(id, s.msgBase, kept, 'user');
    return kept;
  };
  // With the request's Idempotency-Key (if any): where its answer streams from, and the message it names.
  const res = await rerunFrom(
    p.deps,
    p.tenant,
    id,
    pick,
    () => ({ after, ...(assistant ? { message: assistant } : {}) }),
    p.ifMatch,
  );
  const { state } = res;
  // Made already by a request of the same key whose answer was lost (with its stream record, say expired): nothing
  // was cut now, and the answer is that request's run, streamed from where its answer did (the log still holds it)
  // — not from now, which showed an empty answer once that run had ended. Its write started the run: no status head.
  if (res.replayed && res.entry?.after)
    return {
      after: res.entry.after,
      revision: 0,
      assistant: res.entry.message,
      known: [],
      state,
      status: null,
      delivered: [],
      decided: [],
    };
  return {
    after,
    revision: state.revision,
    wrote: res.wrote,
    assistant,
    known: [],
    state,
    status: statusOf(state),
    delivered: [],
    decided: [],
  };
}
