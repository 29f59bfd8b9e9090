import type { z } from 'zod';
import { asBlocks, pendingToolCalls, type StoredMessage } from '../history.js';
import type { postMessageBody } from '../schemas.js';
import { assertBudgetLeft } from '../engine/budget.js';
import { eventOf } from '../events/schemas.js';
import { AlreadyPosted, encodeBlocks, type PostedGuard } from '../store/apply-ops.js';
import { resultsTurn } from '../store/pending.js';
import { interruptedResult } from '../engine/policy.js';
import { checkIfMatch, mutate, runOps, type MutationResult, type SessionDeps } from './mutate.js';
import { assertActionOpen } from './deadlines.js';
import { withText } from '../openapi/serializer.js';

/**
 * A follow-up user message. While a run is in flight (or waits for a client) it is queued and joins the next user
 * turn; `interrupt` also aborts the turn in flight. Otherwise it starts a run. `by`: who posted it (a client
 * token's subject), recorded on `message.queued`. `posted`: a chat's message (POST /v1/chat), recorded with the
 * post; one the session was given lately is not posted again (AlreadyPosted, checked in the write itself too).
 */
export function addMessage(
  deps: SessionDeps,
  tenant: string,
  id: string,
  body: z.infer<typeof postMessageBody>,
  ifMatch?: number,
  by?: string,
  posted?: PostedGuard,
): Promise<MutationResult> {
  const blocks = asBlocks(body.content ?? body.text ?? '');
  const message: StoredMessage = { role: 'user', content: blocks };
  // Encoded once: the store joins it into the next user turn as it is (MAX_TURN_BYTES caps that turn: 413).
  const queued = encodeBlocks(blocks);
  // A chat's message sent again is answered as the first one was (AlreadyPosted) whatever its If-Match: its post
  // moved the revision. So If-Match is checked after that lookup (the write is guarded by it all the same).
  return mutate(deps, tenant, id, posted ? undefined : ifMatch, async (s) => {
    const before = posted && s.chatPosted?.find((e) => e.id === posted.id);
    if (before) throw new AlreadyPosted(before);
    checkIfMatch(s, ifMatch);
    // A new message needs budget left, whatever the status: a run in flight would stop before sending it anyway.
    assertBudgetLeft(s);
    const queuedEvent = eventOf('message.queued', { message, interrupt: body.interrupt, by });
    const guard = {
      status: [s.status],
      ...(ifMatch !== undefined ? { rev: ifMatch } : {}),
      ...(posted ? { posted } : {}),
    };
    if (s.status === 'requires_action' && s.pending?.turn) {
      // A message instead of the reviewed reply's calls: they are answered "not run", the message follows them in
      // the same user turn, and a run starts. It answers the review as `continue` does, so after the review's
      // deadline it is refused as `continue` is (else it would outrun `on_action_timeout: "fail"`).
      assertActionOpen(s, deps.store.clock.now());
      // Every call, whatever result the review step holds: none ran, and the one a `validate: true` client tool's
      // check gave it at review time is what running it would have answered (as `continue` does), not what a message
      // instead of running it answers.
      const unrun = resultsTurn(
        s.pending.calls.map((c) => ({ id: c.id })),
        () => interruptedResult('not run: the turn was reviewed and answered with a message'),
      );
      const run = runOps(s, { pending: null });
      return {
        guard,
        ops: {
          ...run,
          queue_push: [queued],
          ...(unrun.length ? { queue: { results: unrun } } : {}),
          events: [queuedEvent, ...(run.events ?? [])],
        },
        starts: true,
      };
    }
    if (s.status === 'running' || s.status === 'requires_action') {
      const interrupt = body.interrupt && s.status === 'running';
      return {
        guard,
        ops: {
          queue_push: [queued],
          events: [queuedEvent],
          ...(interrupt ? { hset: { control: 'interrupt' } } : {}),
        },
        queued: true,
        ...(interrupt ? { after: () => deps.store.publishControl(id, 'interrupt') } : {}),
      };
    }
    // A new message on a failed tool step accepts its results as they stand: they go to the model as they are.
    const run = runOps(
      s,
      s.status === 'failed' && s.pending ? { pending: { ...s.pending, review: true } } : {},
    );
    return {
      guard,
      ops: { ...run, queue_push: [queued], events: [queuedEvent, ...(run.events ?? [])] },
      starts: true,
    };
  });
}

/**
 * The history the next turn sends (pending tool calls are answered first); with `includeCompacted`, also every
 * segment compactions summarized, oldest first, so nothing the session ever had is out of reach.
 */
export async function listMessages(deps: SessionDeps, tenant: string, id: string, includeCompacted = false) {
  await deps.store.loadFor(tenant, id);
  const [history, compacted] = await Promise.all([
    deps.store.historyForAnswer(tenant, id),
    includeCompacted ? deps.store.compacted(id) : undefined,
  ]);
  const pending = pendingToolCalls(history.last ? [history.last] : []).map((c) => c.id);
  if (compacted) return { data: history.messages(), pending_tool_calls: pending, compacted };
  // The answer's text from the messages' stored JSON (each made text as a heavy step of its own): the serializer
  // neither stringifies 2 MB in one go nor needs the messages parsed — `data` is decoded only when read (the
  // response check, which bodies over RESPONSE_CHECK_MAX_BYTES skip). Its keys in the body's order, so it is
  // JSON.stringify(body) (the response check of the tests compares the two).
  const body = {
    get data() {
      return history.messages();
    },
    pending_tool_calls: pending,
  };
  const text = `{"data":[${history.texts.join(',')}],"pending_tool_calls":${JSON.stringify(pending)}}`;
  return withText(body, text);
}
