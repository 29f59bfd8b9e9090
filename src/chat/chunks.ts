/**
 * A session's event log (spec §4) as the AI SDK's UI message stream (spec §7.3): the chunks `useChat` and
 * `readUIMessageStream` read, made here without the `ai` package (its schema checks them in test/chat/chat.test.ts).
 * One `ChatTranslator` per stream: it is fed the events of one run in log order and says when the stream ends. It is
 * one state machine over one stream (the open step, turn, blocks and held calls), so one file past 400 lines; what
 * it reads of the events, and their small conversions, are event-shapes.ts.
 *
 * - A step (`start-step` … `finish-step`) is one model turn and the server tools it ran.
 * - Content blocks become `text-*`, `reasoning-*` (thinking), `tool-input-*` (tool_use, server_tool_use), their
 *   ids `<iteration>-<block index>`; a turn without `stream.event`s (`"stream": false`) is rendered from its
 *   `turn.completed` message.
 * - `tool.completed` → `tool-output-available` / `tool-output-error`; a denial → `tool-output-denied`. A result a
 *   review replaced (`tool_result.replaced`) → the call's output again, as the replacement is (the reader takes the
 *   second output over the first; an `is_error` one turns the part to `output-error`, and back). An approval with an
 *   edited input (`tool_call.decided` with `input`) → a second `tool-input-available` with that input, before the
 *   approval's answer: the part shows the call that ran, as the history does; so does a `tool.completed` whose input
 *   is not the one the part shows (an edit decided before the stream's cursor). The calls of a
 *   reply whose stop reason ends the run (`max_tokens`, `refusal`, …) are never run and get no `tool.completed`: the
 *   history answers them `Error: not run: …` (src/engine/turns.ts `commitStop`), and so does its `turn.completed`
 *   here, with `tool-output-error`.
 * - A tenant tool's result delivered while the session waited for its client (its task queued while the client was
 *   asked) comes after the stream that asked had ended: the answer to the client's next message shows it first
 *   (`deliveredFirst`), when that message does not.
 * - A call whose approval the client's message shows asked and unanswered (`approval-requested`) but that was decided
 *   elsewhere (REST, the WebSocket, another tab, an action's timeout) is answered in the stream before any output of
 *   it: the `ai` package's schema wants `approved` in the approval of a part past `approval-requested`. A decision
 *   the stream reads is answered where it is (`tool_call.decided`); one made before its cursor, which the request
 *   read in the session (`decided`), right after `start` (`decidedFirst`); a call that completes with neither known
 *   (a replay whose record kept no decisions) ran, so was approved.
 * - A call of a client tool with `validate: true` is the service's to refuse (its input checked against the schema:
 *   src/engine/policy.ts `pendingCalls`): its `tool-input-available` waits, past the stop reason, for the service's
 *   word. A refused input's `tool.completed` (an `is_error` result, written before the step's end) shows it as the
 *   service's (`providerExecuted`, so it never reaches `onToolCall`), then its `tool-output-error`; the step's end
 *   (its `session.status`, or the run going on) releases the others as the client's. A reply under review
 *   (`pause_after_turn`: `requires_action` `review_turn`, before its step ran and checked anything) releases them all
 *   as the client's, as a tool's without `validate` and as the history shows them.
 * - A sub-agent's call (an `agent` tool, spec §7.6) is run by the service, not the client: `providerExecuted`, and
 *   a `requires_action` that waits only for sub-agents does not end the stream (the child's result comes as its
 *   `tool.completed`, then the run goes on).
 * - `turn.dropped` (an interrupt, a retry, a max-tokens retry) and a turn started again without having completed
 *   (a run taken over after a crash) → `reset-step` (the SDK drops the parts of the current step) and a transient
 *   `data-turn-dropped` chunk `{iteration, reason}`.
 * - `session.status`: `requires_action` → a `tool-approval-request` per call awaiting approval (its `approvalId` is
 *   the tool_use id), or the client tool calls left as `input-available` for `addToolOutput`; then `finish`.
 *   `idle` → `finish` with the stop reason mapped; `failed` → `error`, then `finish` (`error`). In a replay of the
 *   whole message, a status before the current run's start ends nothing: that run's open turn is dropped, and on.
 * - A stream that ends while a turn is open (a cancel, a failure, the stream cut) closes the turn's open parts and
 *   resets its step as for a dropped turn (`reason`: `cancelled`, `failed`, `stream_ended`): the session keeps no
 *   partial reply, and a resumed stream replays the turn from its start.
 * - The answer to a user message the request posted shows nothing of the run until that message joins it (its
 *   `message.appended`, the first user one after its own `message.queued`, told by the revision of the post's
 *   write): the turns before are an earlier message's answer (the reply it was posted during, that reply's
 *   `pause_turn` continuation, another client's message queued after the cursor and joined alone, …). A status ends
 *   it as ever (one queued while the session waits for the client gets what it waits for, and its end).
 * - `message.appended` of a follow-up queued after the stream's own message joined (or, for a stream that answers no
 *   message of its own, after its cursor) that joins a turn after a reply (a step's tool results, or a turn of its
 *   own) → `finish-step`, `finish` (`other`): the history shows the follow-up as a user message of its own and the
 *   answer after it as another assistant message, which the follow-up's own answer streams. One merged into the user
 *   turn the stream answers (an interrupt of its first reply) continues the stream's message, as in the history.
 * - `session.deleted` → `abort`.
 */
import { isDeepStrictEqual } from 'node:util';
import type { z } from 'zod';
import { compareIds } from '../events/cursor.js';
import type { DecidedCall } from '../store/idempotency.js';
import {
  GOES_ON,
  appended,
  asksUser,
  awaitsAgentsOnly,
  decided,
  dropped,
  finishReason,
  parseJson,
  replaced,
  resultText,
  status,
  streamEvent,
  toolCompleted,
  turnCompleted,
  turnStarted,
  type Block,
  type FinishReason,
  reasonOf,
} from './event-shapes.js';

/**
 * The events that show the step a reply's calls are in is over, the run going on with its results: the follow-ups
 * merged into its results turn, the next turn (or the run's final status, which ends the stream). What the service
 * answered itself by then it wrote before them (src/engine/tool-step.ts: the step's `tool.completed` events come
 * first in its commits). Not `iteration.persisted`: the reply's own commit writes one too, before its step ran — a
 * reply under review (src/engine/review-turn.ts, `pause_after_turn`) is committed with it, just before its
 * `requires_action` (`review_turn`), and none of its calls was checked yet. (A dropped turn is not among them: its
 * reset forgets the calls.)
 */
const PAST_STEP = new Set(['turn.started', 'message.appended']);

/**
 * The events a stream answering its own user message reads before that message joins the run (`awaitingOwn`): the
 * queue's, and the statuses and the deletion that end it. Turns, their stream and their tools before then are the
 * answer to an earlier message (a reply going on, `pause_turn`, a compaction, a step's results): not this one's.
 */
const BEFORE_OWN = new Set(['message.queued', 'message.appended', 'session.status', 'session.deleted']);

/** One UI message chunk (the `ai` package's `UIMessageChunk`), as JSON. */
export type UIChunk = { type: string } & Record<string, unknown>;

/**
 * A tenant tool's result delivered while the session waited for its client (a `tool.completed`'s data): the
 * answer to the client's next message shows it first (src/chat/post.ts `deliveredMeanwhile`).
 */
export type DeliveredResult = {
  tool_use_id: string;
  name: string;
  input: unknown;
  content: unknown;
  is_error: boolean;
};

/** What an open content block of the turn became. */
interface OpenBlock {
  kind: 'text' | 'reasoning' | 'tool';
  id: string;
  name: string;
  json: string;
  providerExecuted: boolean;
}

export class ChatTranslator {
  /** The stream is over (finish or abort sent): nothing more is to be written. */
  done = false;
  private stepOpen = false;
  /** The current step has no turn in it (it was reset): the next turn reuses it. */
  private stepEmpty = false;
  private turnOpen = false;
  private streamed = false;
  private iteration = 0;
  private readonly open = new Map<number, OpenBlock>();
  /**
   * The `tool-input-available` of the turn's client calls, held until the reply's stop reason is known (its
   * `message_delta`, or `turn.completed`): a call of a reply that ends the run is never run, and must not reach the
   * client's `onToolCall`.
   */
  private readonly held: UIChunk[] = [];
  /**
   * The `tool-input-available` of the reply's calls of `validated` tools, held past the stop reason until the service
   * has checked their input: a refused one is answered by the service (`tool.completed`, before the step's end) and
   * must not reach `onToolCall`; the step's end releases the others. By call id, in the reply's order.
   */
  private readonly checking = new Map<string, UIChunk>();
  /**
   * The calls whose outcome the client's message shows (the outputs it gave, `addToolOutput`): their `tool.completed`
   * is that output, taken by the session (as JSON text, when it was not a string), and is not sent back, which would
   * turn the Chat's object into that text (and echo a large output whole).
   */
  private readonly answered: ReadonlySet<string>;
  /** The session's client tools with `validate: true` (by name). */
  private readonly validated: ReadonlySet<string>;
  /** Tool calls the client's message holds already (so outputs may refer to them). */
  private readonly known: Set<string>;
  private readonly denied = new Set<string>();
  /**
   * The tool names of the calls this stream showed or learnt of (a call's `tool-input-available` needs it again when
   * an approval edits its input).
   */
  private readonly names = new Map<string, string>();
  /**
   * The input each call's part shows (the client's message's, or this stream's last `tool-input-available`): a
   * `tool.completed` whose input differs ran an approval's edited input, which the part then takes first.
   */
  private readonly inputs = new Map<string, unknown>();
  /**
   * Calls whose part in the Chat has an approval asked and not answered (`approval-requested`; the approval id is the
   * call's id): those the client's message shows so, and those this stream sent a `tool-approval-request` for. The
   * first answer the stream gives such a call is its `tool-approval-response`, which takes it out.
   */
  private readonly asked = new Set<string>();
  /** Decisions made before the stream's cursor on calls of `asked` (`decidedFirst()`). */
  private readonly decidedBefore: readonly DecidedCall[];
  /** Calls `decidedFirst()` answered: their `tool_call.decided`, read after all, is not answered again. */
  private readonly answeredFirst = new Set<string>();
  /** The session's sub-agent tools (by name): their calls are the service's to answer, not the client's. */
  private readonly agents: ReadonlySet<string>;
  /**
   * The id of the current run's first event, for a replay of the whole assistant message: a status before it is
   * the end of an earlier run of the same message (a pause the client answered; a failure or a stop taken up again
   * without a new question), which does not end the stream.
   */
  private readonly pausedBefore: string | undefined;

  /**
   * The stream answers a user message this request posted (queued after the stream's cursor) that has not joined the
   * run yet: until it does, the turns the log shows answer earlier messages (the reply in flight when it was posted,
   * its `pause_turn` or compaction continuation, the turn after a step's results) and are passed over (`BEFORE_OWN`).
   * Its join is the first user `message.appended` after its own `message.queued`: a merge takes the whole queue, so
   * that append holds every message queued by then, this one's among them (two tabs posting at once: each stream's
   * own is in the one append, and each goes on with the answer to it). Its own queued event is the one of the post's
   * write (`ownRevision`, the revision of that event): another client's message queued between this post's cursor
   * and its write may join the run alone, at a turn's end before this one is written, and its append and its
   * answer are not this stream's.
   */
  private awaitingOwn: boolean;
  /**
   * The revision of the write that queued the stream's own message (its `message.queued` event's revision), when the
   * request knows it. Without it (an Idempotency-Key record kept before it was, or events read without revisions),
   * the first `message.queued` read stands for the own one: right unless another message queued after the cursor
   * joins alone before the own one is written.
   */
  private readonly ownRevision: number | undefined;
  /** The stream's own `message.queued` was read while `awaitingOwn`: the next user append holds its message. */
  private ownQueued = false;
  /** `message.queued` events of other messages read since the stream's own joined (or since its start). */
  private othersQueued = 0;
  /**
   * The message had a reply before the stream's first event (the stream continues an assistant message), and the
   * iterations whose reply the stream read completed and not dropped since: a follow-up merged into the trailing user
   * turn (`into_last`) after a reply joins a results turn, which the history shows as a message of its own; before
   * any, it joins the user turn the message answers.
   */
  private repliedBefore: boolean;
  private readonly replied = new Set<number>();

  /** Closed steps the stream starts with, after `start` (a replay after a retry: src/chat/history.ts keptSteps). */
  private readonly earlier: UIChunk[];

  /** Results the stream shows first (`deliveredFirst()`), then not again when their `tool.completed` comes. */
  private readonly delivered: readonly DeliveredResult[];
  private readonly shownFirst = new Set<string>();

  /**
   * `messageId`: the assistant message the stream continues (its `start` names it); `known`: the tool calls the
   * client's message holds; `agents`: the names of the session's `agent` tools; `pausedBefore`: see above;
   * `earlier`: see above (their calls are known); `delivered`: see `deliveredFirst()`.
   */
  constructor(
    private readonly messageId: string | undefined,
    known: Iterable<string> = [],
    opts: {
      agents?: Iterable<string>;
      pausedBefore?: string | undefined;
      midRun?: boolean;
      earlier?: UIChunk[];
      delivered?: readonly DeliveredResult[];
      /** The stream answers a user message this request posted (its `message.queued` is after the cursor). */
      ownMessage?: boolean;
      /** The revision of the write that queued that message, when known: see `ownRevision`. */
      ownRevision?: number | undefined;
      /** The names of the session's client tools with `validate: true`. */
      validated?: Iterable<string>;
      /** The calls whose outcome the client's message shows (its own outputs): see `answered`. */
      answered?: Iterable<string>;
      /** The message holds a reply from before the stream's cursor (see `repliedBefore`). */
      repliedBefore?: boolean;
      /** The inputs of the calls the client's message holds, by call id (see `inputs`). */
      inputs?: Iterable<readonly [string, unknown]>;
      /** The calls the client's message shows with an approval asked and not answered (see `asked`). */
      asking?: Iterable<string>;
      /** Decisions made elsewhere before the cursor on those calls: see `decidedFirst()`. */
      decided?: readonly DecidedCall[];
    } = {},
  ) {
    this.awaitingOwn = opts.ownMessage ?? false;
    this.ownRevision = opts.ownRevision;
    this.validated = new Set(opts.validated ?? []);
    this.answered = new Set(opts.answered ?? []);
    this.repliedBefore = (opts.repliedBefore ?? false) || (opts.earlier ?? []).length > 0;
    this.known = new Set(known);
    for (const [id, input] of opts.inputs ?? []) this.inputs.set(id, input);
    for (const id of opts.asking ?? []) this.asked.add(id);
    this.decidedBefore = opts.decided ?? [];
    this.agents = new Set(opts.agents ?? []);
    this.pausedBefore = opts.pausedBefore;
    this.midRun = opts.midRun ?? false;
    this.earlier = opts.earlier ?? [];
    this.delivered = opts.delivered ?? [];
    for (const c of this.earlier)
      if (c.type === 'tool-input-available' && typeof c['toolCallId'] === 'string') {
        this.known.add(c['toolCallId']);
        if (typeof c['toolName'] === 'string') this.names.set(c['toolCallId'], c['toolName']);
        this.inputs.set(c['toolCallId'], c['input']);
      }
  }

  /**
   * The replay starts inside the run (its start was trimmed from the log), maybe inside a turn: until a turn starts,
   * a completed turn is shown whole from its message (its streamed events before it are passed over, some being
   * gone).
   */
  private midRun: boolean;

  /**
   * The revision the request's own writes reached: `session.status` events of lower revisions are passed over. A
   * chat request may write several times before its stream (one decision per approval answered), and the statuses
   * in between (`requires_action` with the calls not decided yet) are not where the run stands.
   */
  statusFrom = 0;

  /** The first chunks of the stream. */
  start(): UIChunk[] {
    return [
      this.messageId ? { type: 'start', messageId: this.messageId } : { type: 'start' },
      ...this.earlier,
    ];
  }

  /**
   * The outputs of the tenant tool calls whose results came while the session waited for its client, after the
   * stream that asked it had ended (their `tool.completed` is before this stream's cursor): after `start`, before
   * the run. A `tool.completed` of one of them that the stream reads too (delivered as the request was handled) is
   * not shown twice.
   */
  deliveredFirst(): UIChunk[] {
    const out: UIChunk[] = [];
    for (const r of this.delivered) {
      // Shown with its approval (`decidedFirst`).
      if (this.shownFirst.has(r.tool_use_id)) continue;
      const chunks = this.toolCompleted(r);
      if (chunks.length > 0) this.shownFirst.add(r.tool_use_id);
      out.push(...chunks);
    }
    return out;
  }

  /**
   * The answers to approvals the client's message shows asked, decided elsewhere before the stream's cursor (by REST,
   * the WebSocket, another tab, a timeout): after `start`, before the run and the results shown first, so the parts
   * take `approved` before any output of theirs — an approval (with its edited input first, when the part shows
   * another) as `tool-approval-response`, then its output when the call ran already (its `tool.completed` is before
   * the cursor; one the stream reads too is not shown twice); a denial as that and `tool-output-denied`, as when the
   * stream reads them.
   */
  decidedFirst(): UIChunk[] {
    const out: UIChunk[] = [];
    for (const d of this.decidedBefore) {
      const id = d.tool_use_id;
      if (!this.asked.has(id) || !this.known.has(id)) continue;
      this.answeredFirst.add(id);
      this.names.set(id, d.name);
      // An edit shows as one when the part shows another input (the decision's input is the call's, edited or not).
      const edited = d.approved && d.input !== undefined && !isDeepStrictEqual(this.inputs.get(id), d.input);
      out.push(...this.decision(id, d.approved, edited ? d.input : undefined, d.reason));
      if (!d.approved || !d.result) continue;
      const ran = { tool_use_id: id, name: d.name, input: d.input, ...d.result };
      const chunks = this.toolCompleted(ran);
      if (chunks.length > 0) this.shownFirst.add(id);
      out.push(...chunks);
    }
    return out;
  }

  /** The chunks of one event of the log (none for the events a chat does not show). */
  event(type: string, data: unknown, id = '', revision: number | null = null): UIChunk[] {
    if (this.done) return [];
    if (this.awaitingOwn && !BEFORE_OWN.has(type)) return [];
    if (this.checking.size === 0) return this.translate(type, data, id, revision);
    // A call whose input the service checks: its refusal is a `tool.completed` before the step's end.
    if (type === 'tool.completed') {
      const ev = toolCompleted.safeParse(data);
      const held = ev.success ? this.checking.get(ev.data.tool_use_id) : undefined;
      if (ev.success && held) {
        this.checking.delete(ev.data.tool_use_id);
        return [{ ...held, providerExecuted: true }, ...this.toolCompleted(ev.data, true)];
      }
    }
    // The step waits for the client: the calls it did not refuse are the client's (the status asks for them).
    if (type === 'session.status' && status.safeParse(data).data?.status === 'requires_action')
      return [...this.releaseChecking(false), ...this.translate(type, data, id, revision)];
    // The run went on past the step (all its calls answered, none by the client): any still held were answered by
    // the service. Another status ends the stream (`finish` says so) or is an earlier run's, in a replay (the calls
    // wait for the current run's). An event of the step itself (a server tool's start or result) is no end.
    if (PAST_STEP.has(type))
      return [...this.releaseChecking(true), ...this.translate(type, data, id, revision)];
    return this.translate(type, data, id, revision);
  }

  private translate(type: string, data: unknown, id: string, revision: number | null): UIChunk[] {
    switch (type) {
      case 'turn.started':
        this.midRun = false;
        return this.turnStarted(turnStarted.safeParse(data).data?.iteration ?? this.iteration + 1);
      case 'stream.event': {
        const ev = streamEvent.safeParse(data);
        return ev.success ? this.streamEvent(ev.data) : [];
      }
      case 'turn.completed': {
        const ev = turnCompleted.safeParse(data);
        if (!ev.success) return [];
        // The turn began before the replay's first event: it is shown from its message.
        const opened = this.midRun && !this.turnOpen ? this.turnStarted(ev.data.iteration) : [];
        this.midRun = false;
        this.replied.add(ev.data.iteration);
        return [...opened, ...this.turnCompleted(ev.data.message)];
      }
      case 'tool.completed': {
        const ev = toolCompleted.safeParse(data);
        if (!ev.success) return [];
        // Shown first (`deliveredFirst`): this is that delivery.
        if (this.shownFirst.delete(ev.data.tool_use_id)) return [];
        return this.toolCompleted(ev.data);
      }
      case 'tool_call.decided': {
        const ev = decided.safeParse(data);
        if (!ev.success) return [];
        const id = ev.data.tool_use_id;
        const approved = ev.data.decision !== 'deny';
        // Answered first already (the request read it in the session, and the cursor was read before it was written).
        if (this.answeredFirst.has(id)) {
          if (!approved) this.denied.add(id);
          return [];
        }
        return this.decision(id, approved, ev.data.input, ev.data.reason);
      }
      case 'tool_result.replaced': {
        const ev = replaced.safeParse(data);
        return ev.success ? this.replacedResult(ev.data) : [];
      }
      case 'turn.dropped': {
        const ev = dropped.safeParse(data).data;
        // A reply dropped after its completion (a retry, a max-tokens retry, a takeover) is not in the history.
        if (ev?.iteration !== undefined) this.replied.delete(ev.iteration);
        return this.reset(ev?.reason ?? 'dropped', ev?.iteration ?? this.iteration);
      }
      case 'session.status': {
        if (revision !== null && revision < this.statusFrom) return [];
        const ev = status.safeParse(data);
        const paused = this.pausedBefore !== undefined && id !== '' && compareIds(id, this.pausedBefore) < 0;
        return ev.success ? this.status(ev.data, paused) : [];
      }
      case 'message.queued':
        if (!this.awaitingOwn) this.othersQueued++;
        // The own one, or (its revision unknown) the first read. An event of a lower revision is another client's,
        // queued before the post wrote (the log is in revision order: one at or past it is the post's, or after it).
        else if (this.ownRevision === undefined || revision === null || revision >= this.ownRevision)
          this.ownQueued = true;
        return [];
      case 'message.appended': {
        const ev = appended.safeParse(data);
        if (!ev.success || !asksUser(ev.data)) return [];
        if (this.awaitingOwn) {
          // A message queued before this stream's cursor, or after it by another client, joining before this one
          // was queued: not the stream's (its answer, passed over, is not either).
          if (!this.ownQueued) return [];
          // The stream's own message joins (with whatever else was queued): the run answers it from here.
          this.awaitingOwn = false;
          this.othersQueued = 0;
          this.repliedBefore = false;
          this.replied.clear();
          return [];
        }
        const merged =
          this.othersQueued > 0 && !(ev.data.into_last && !this.repliedBefore && this.replied.size === 0);
        // Every message queued so far is merged now (a merge takes all of them).
        this.othersQueued = 0;
        // One queued before the stream's cursor, or one merged into the user turn the stream answers (an interrupt before any reply: one user message in the history): the answer the stream goes on
        // with answers this user turn, the replies before it are not after it.
        if (!merged) {
          this.repliedBefore = false;
          this.replied.clear();
          return [];
        }
        // A follow-up queued while this stream ran joins the run after a reply (a step's tool results, or a turn of
        // its own): the history shows the answer after it as another assistant message (src/chat/history.ts, as the
        // replay of GET /v1/chat/:id/stream starts there), and the follow-up's own answer streams it (its post read
        // its cursor before it queued, with the run going on). A message queued before this stream's cursor (while
        // the session waited for the client, its post's answer ended at once) has no stream of its own: this one
        // goes on through it. (A stream's own message is never counted here: it joined before, see `awaitingOwn`.)
        return [...this.dropOpenTurn('interrupt'), ...this.finish('other')];
      }
      case 'session.deleted':
        this.done = true;
        return [{ type: 'abort', reason: 'session_deleted' }];
      default:
        return [];
    }
  }

  /**
   * A decision on call `id` (`input`: an approval's edited input; `reason`: a denial's). The part's approval, asked and
   * not answered yet (`asked`), gets `approved` (and a denial's reason) first, which the ai package's schema requires
   * of a part past `approval-requested` — also for a decision made elsewhere (REST, another tab, a timeout) or
   * replayed from the log. A denial then denies the part (its `tool.completed`, the denial's result, shows nothing).
   */
  private decision(id: string, approved: boolean, input: unknown, reason: unknown): UIChunk[] {
    const answered: UIChunk[] = this.asked.delete(id)
      ? [
          {
            type: 'tool-approval-response',
            approvalId: id,
            approved,
            ...(approved ? {} : reasonOf(reason)),
          },
        ]
      : [];
    // An edited input first: the answer then finds the part as the approval left it (`approval-responded`).
    if (approved) return [...this.editedInput(id, input), ...answered];
    this.denied.add(id);
    if (!this.known.has(id)) return [];
    return [...answered, { type: 'tool-output-denied', toolCallId: id }];
  }

  /**
   * An output of a call whose approval the Chat shows asked and that the stream knows no decision of (a replay whose
   * record kept none): the call ran, so it was approved — the approval is answered first, or the part would end
   * `output-*` with an approval the ai package's schema refuses.
   */
  private approvedFirst(id: string): UIChunk[] {
    return this.asked.delete(id) ? [{ type: 'tool-approval-response', approvalId: id, approved: true }] : [];
  }

  /**
   * The end of a stream cut short (the log could not be read, the replica shuts down, the token ended): an `error`,
   * then `finish`. A turn still open is dropped from the message (`stream_ended`): it may yet complete, which a
   * resumed stream replays.
   */
  fail(message: string): UIChunk[] {
    return this.failWith(message, 'stream_ended');
  }

  private failWith(message: string, dropped: string): UIChunk[] {
    if (this.done) return [];
    return [...this.dropOpenTurn(dropped), { type: 'error', errorText: message }, ...this.finish('error')];
  }

  /**
   * A turn the stream leaves open (it ends before the turn completed): its open parts are closed and its step reset,
   * as for a dropped turn. None when no turn is open, or the open one showed nothing yet.
   */
  private dropOpenTurn(reason: string): UIChunk[] {
    if (!this.turnOpen) return [];
    // Nothing of it was shown (a failure before its first event): nothing to take back, and its step, empty, is
    // the next turn's (a replay goes on past an earlier run's failure).
    if (!this.streamed) {
      this.turnOpen = false;
      this.stepEmpty = this.stepOpen;
      return [];
    }
    const out: UIChunk[] = [];
    for (const b of this.open.values()) {
      if (b.kind === 'text') out.push({ type: 'text-end', id: b.id });
      else if (b.kind === 'reasoning') out.push({ type: 'reasoning-end', id: b.id });
      // No `tool-input-available` for a cut input (it would reach onToolCall): the call ends as an error.
      else
        out.push({
          type: 'tool-input-error',
          toolCallId: b.id,
          toolName: b.name,
          input: parseJson(b.json),
          errorText: 'The turn ended before this call was complete.',
          ...(b.providerExecuted ? { providerExecuted: true } : {}),
        });
    }
    // Calls whose input was complete but whose reply was not: they were never offered to the client either.
    for (const c of this.held)
      out.push({
        ...c,
        type: 'tool-input-error',
        errorText: 'The turn ended before its reply was complete.',
      });
    return [...out, ...this.reset(reason, this.iteration)];
  }

  private turnStarted(iteration: number): UIChunk[] {
    const out: UIChunk[] = [];
    // Started again without having completed: the run was taken over (a crash); its partial parts go.
    if (this.turnOpen) out.push(...this.reset('restarted', this.iteration));
    if (!this.stepEmpty) {
      if (this.stepOpen) out.push({ type: 'finish-step' });
      out.push({ type: 'start-step' });
    }
    this.stepOpen = true;
    this.stepEmpty = false;
    this.turnOpen = true;
    this.streamed = false;
    this.iteration = iteration;
    this.open.clear();
    return out;
  }

  private reset(reason: string, iteration: number): UIChunk[] {
    this.turnOpen = false;
    this.open.clear();
    this.forgetHeld();
    if (!this.stepOpen) return [];
    this.stepEmpty = true;
    return [
      { type: 'reset-step' },
      { type: 'data-turn-dropped', data: { iteration, reason }, transient: true },
    ];
  }

  private streamEvent({ event }: z.infer<typeof streamEvent>): UIChunk[] {
    if (!this.turnOpen) return [];
    this.streamed = true;
    const index = event.index ?? -1;
    if (event.type === 'content_block_start' && event.content_block)
      return this.blockStart(index, event.content_block);
    if (event.type === 'message_delta' && event.delta?.stop_reason)
      return this.release(event.delta.stop_reason);
    const b = this.open.get(index);
    if (!b) return [];
    if (event.type === 'content_block_delta' && event.delta) {
      const d = event.delta;
      if (b.kind === 'text' && d.type === 'text_delta' && d.text)
        return [{ type: 'text-delta', id: b.id, delta: d.text }];
      if (b.kind === 'reasoning' && d.type === 'thinking_delta' && d.thinking)
        return [{ type: 'reasoning-delta', id: b.id, delta: d.thinking }];
      if (b.kind === 'tool' && d.type === 'input_json_delta' && d.partial_json) {
        b.json += d.partial_json;
        return [{ type: 'tool-input-delta', toolCallId: b.id, inputTextDelta: d.partial_json }];
      }
      return [];
    }
    if (event.type === 'content_block_stop') {
      this.open.delete(index);
      return this.blockEnd(b, parseJson(b.json));
    }
    return [];
  }

  private blockStart(index: number, cb: Block): UIChunk[] {
    const id = `${this.iteration}-${index}`;
    if (cb.type === 'text') {
      this.open.set(index, { kind: 'text', id, name: '', json: '', providerExecuted: false });
      return [{ type: 'text-start', id }, ...(cb.text ? [{ type: 'text-delta', id, delta: cb.text }] : [])];
    }
    if (cb.type === 'thinking') {
      this.open.set(index, { kind: 'reasoning', id, name: '', json: '', providerExecuted: false });
      return [{ type: 'reasoning-start', id }];
    }
    if ((cb.type === 'tool_use' || cb.type === 'server_tool_use') && cb.id && cb.name) {
      const providerExecuted = cb.type === 'server_tool_use' || this.agents.has(cb.name);
      this.open.set(index, { kind: 'tool', id: cb.id, name: cb.name, json: '', providerExecuted });
      this.known.add(cb.id);
      this.names.set(cb.id, cb.name);
      return [
        {
          type: 'tool-input-start',
          toolCallId: cb.id,
          toolName: cb.name,
          ...(providerExecuted ? { providerExecuted } : {}),
        },
      ];
    }
    return this.serverResult(cb);
  }

  private blockEnd(b: OpenBlock, input: unknown): UIChunk[] {
    if (b.kind === 'text') return [{ type: 'text-end', id: b.id }];
    if (b.kind === 'reasoning') return [{ type: 'reasoning-end', id: b.id }];
    const available = { type: 'tool-input-available', toolCallId: b.id, toolName: b.name, input };
    this.inputs.set(b.id, input);
    if (b.providerExecuted) return [{ ...available, providerExecuted: true }];
    this.held.push(available);
    return [];
  }

  /** The calls being checked, as the client's (`service` false) or as answered by the service. */
  private releaseChecking(service: boolean): UIChunk[] {
    const out = [...this.checking.values()].map((c) => (service ? { ...c, providerExecuted: true } : c));
    this.checking.clear();
    return out;
  }

  /** The turn's state is gone (a reset): its held calls and those being checked were never offered. */
  private forgetHeld(): void {
    this.held.length = 0;
    this.checking.clear();
  }

  /**
   * The held client calls, once the reply's stop reason is known: as they are when the run goes on with them; the
   * service's (`providerExecuted`) when the reply ends the run, whose calls it answers "not run".
   */
  private release(stopReason: string): UIChunk[] {
    const goesOn = GOES_ON.has(stopReason);
    const out: UIChunk[] = [];
    for (const c of this.held) {
      if (!goesOn) out.push({ ...c, providerExecuted: true });
      else if (this.validated.has(String(c['toolName']))) this.checking.set(String(c['toolCallId']), c);
      else out.push(c);
    }
    this.held.length = 0;
    return out;
  }

  /** The result block of a tool the API ran itself (`web_search_tool_result`, …). */
  private serverResult(cb: Block): UIChunk[] {
    if (!cb.type.endsWith('_tool_result') || !cb.tool_use_id || !this.known.has(cb.tool_use_id)) return [];
    return [
      {
        type: 'tool-output-available',
        toolCallId: cb.tool_use_id,
        output: cb.content ?? null,
        providerExecuted: true,
      },
    ];
  }

  private turnCompleted({ content, stop_reason }: z.infer<typeof turnCompleted>['message']): UIChunk[] {
    if (!this.turnOpen) return [];
    const out: UIChunk[] = [];
    // Blocks left open (a stream without their stop) are closed with what the message holds.
    for (const [index, b] of this.open) {
      const final = content[index];
      out.push(...this.blockEnd(b, final?.input ?? parseJson(b.json)));
    }
    this.open.clear();
    if (!this.streamed) {
      content.forEach((cb, index) => {
        // A text block's start carries its text already (as a streamed block's start may); a thinking one's not.
        out.push(...this.blockStart(index, cb));
        const b = this.open.get(index);
        if (!b) return;
        if (b.kind === 'reasoning' && cb.thinking)
          out.push({ type: 'reasoning-delta', id: b.id, delta: cb.thinking });
        out.push(...this.blockEnd(b, cb.input ?? {}));
        this.open.delete(index);
      });
    }
    this.turnOpen = false;
    // A stop reason that ends the run: the reply's calls are answered "not run" in the history, with no event.
    const stopReason = stop_reason ?? 'end_turn';
    out.push(...this.release(stopReason));
    if (!GOES_ON.has(stopReason))
      for (const cb of content)
        if (cb.type === 'tool_use' && cb.id && this.known.has(cb.id) && !this.denied.has(cb.id))
          out.push({
            type: 'tool-output-error',
            toolCallId: cb.id,
            // The history's text (src/engine/turns.ts `commitStop`, policy.ts `interruptedResult`).
            errorText: `Error: not run: the reply stopped with ${stopReason}`,
            // The service answered it, not the client: so `sendAutomaticallyWhen` (which waits for the client's
            // outputs) does not send the message back for it.
            providerExecuted: true,
          });
    return out;
  }

  /** A call the client's message may not hold (a stream resumed mid-run): its input first. */
  private ensureCall(c: { id: string; name: string; input: unknown }): UIChunk[] {
    this.names.set(c.id, c.name);
    if (this.known.has(c.id)) return [];
    this.known.add(c.id);
    this.inputs.set(c.id, c.input);
    return [
      {
        type: 'tool-input-available',
        toolCallId: c.id,
        toolName: c.name,
        input: c.input,
        ...(this.agents.has(c.name) ? { providerExecuted: true } : {}),
      },
    ];
  }

  /** `service`: the service answered the client's call itself (a refused input): not the client's to answer. */
  private toolCompleted(ev: z.infer<typeof toolCompleted>, service = false): UIChunk[] {
    if (this.denied.has(ev.tool_use_id) || this.answered.has(ev.tool_use_id)) return [];
    // A call of a turn before this stream's first (a message posted while another one's tools ran): its part is in
    // that other message, not this one.
    if (!this.known.has(ev.tool_use_id) && !this.stepOpen) return [];
    const out = this.ensureCall({ id: ev.tool_use_id, name: ev.name, input: ev.input });
    const agent = service || this.agents.has(ev.name) ? { providerExecuted: true } : {};
    // The call ran an input its part does not show: an approval's edit, decided before this stream's cursor (REST,
    // another tab), or that the stream did not read.
    const shown = this.inputs.get(ev.tool_use_id);
    if (ev.input !== undefined && this.inputs.has(ev.tool_use_id) && !isDeepStrictEqual(shown, ev.input))
      out.push(...this.newInput(ev.tool_use_id, ev.name, ev.input, service));
    out.push(...this.approvedFirst(ev.tool_use_id));
    out.push(
      ev.is_error
        ? {
            type: 'tool-output-error',
            toolCallId: ev.tool_use_id,
            errorText: resultText(ev.content),
            ...agent,
          }
        : { type: 'tool-output-available', toolCallId: ev.tool_use_id, output: ev.content ?? null, ...agent },
    );
    return out;
  }

  /**
   * An approval's edited input (`input`, absent when none): the call ran with it and the history holds it, so the
   * part's input is replaced by a second `tool-input-available` (the reader updates the call's part in its step:
   * its input, state `input-available`, its `approval` kept). As the call's first one, it is the client's
   * (`onToolCall` fires again, now with the input that runs) unless the service runs it (a sub-agent's call).
   */
  private editedInput(id: string, input: unknown): UIChunk[] {
    const name = this.names.get(id);
    if (input === undefined || name === undefined || !this.known.has(id)) return [];
    return this.newInput(id, name, input);
  }

  /** A call's part takes `input` (`service`: the service answers the call, as `toolCompleted` says). */
  private newInput(id: string, name: string, input: unknown, service = false): UIChunk[] {
    this.inputs.set(id, input);
    return [
      {
        type: 'tool-input-available',
        toolCallId: id,
        toolName: name,
        input,
        ...(service || this.agents.has(name) ? { providerExecuted: true } : {}),
      },
    ];
  }

  /**
   * A result under review replaced (`PUT …/tool-results/:id`): the model gets the replacement, and so does the
   * history, so the part shows it: `tool-output-available` or `tool-output-error` again (the reader replaces the
   * part's output, or turns it to the other state; its `providerExecuted` is kept, as none is given). A denied call's
   * part stays `output-denied`: its `approval` says it was denied, which no chunk takes back, and the `ai` package's
   * schema allows no output beside a denied approval.
   */
  private replacedResult(ev: z.infer<typeof replaced>): UIChunk[] {
    const id = ev.tool_use_id;
    if (!this.known.has(id) || this.denied.has(id)) return [];
    return [
      ...this.approvedFirst(id),
      ev.is_error
        ? { type: 'tool-output-error', toolCallId: id, errorText: resultText(ev.content) }
        : { type: 'tool-output-available', toolCallId: id, output: ev.content ?? null },
    ];
  }

  private status(ev: z.infer<typeof status>, paused: boolean): UIChunk[] {
    if (ev.status === 'running') return [];
    // An earlier run of the message that failed or stopped: its open turn was not kept; the message goes on.
    if (paused && ev.status !== 'requires_action')
      return this.dropOpenTurn(ev.status === 'failed' ? 'failed' : (ev.stop_reason ?? 'stopped'));
    if (ev.status === 'failed') {
      const e = ev.error;
      return this.failWith(e ? `${e.code}: ${e.message}` : 'The run failed.', 'failed');
    }
    if (ev.status === 'requires_action') {
      const action = ev.required_action;
      const out: UIChunk[] = [];
      for (const c of action?.tool_calls ?? []) {
        out.push(...this.ensureCall(c));
        if (action?.type === 'approve_tool_calls') {
          out.push({ type: 'tool-approval-request', approvalId: c.id, toolCallId: c.id });
          this.asked.add(c.id);
        }
      }
      return paused || awaitsAgentsOnly(action, this.agents) ? out : [...out, ...this.finish('tool-calls')];
    }
    const stopReason = ev.stop_reason;
    return [...this.dropOpenTurn(stopReason ?? 'stopped'), ...this.finish(finishReason(stopReason))];
  }

  private finish(reason: FinishReason): UIChunk[] {
    this.done = true;
    // Calls still being checked at an end that is not the step's pause for the client (the stream cut, a cancel, a
    // failure, a follow-up's end): the client is not asked for them here (a resumed stream, or the history, says
    // what became of them).
    const out: UIChunk[] = this.releaseChecking(true);
    if (this.stepOpen) out.push({ type: 'finish-step' });
    this.stepOpen = false;
    out.push({ type: 'finish', finishReason: reason });
    return out;
  }
}
