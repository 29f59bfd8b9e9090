/**
 * A session's event log (spec §4) as the AI SDK's UI message stream (spec §7.3): the chunks `useChat` and
 * `readUIMessageStream` read, made here without the `ai` package (its schema checks them in test/chat/chat.test.ts).
 * One `ChatTranslator` per stream: it is fed the events of one run in log order and says when the stream ends.
 *
 * - A step (`start-step` … `finish-step`) is one model turn and the server tools it ran.
 * - Content blocks become `text-*`, `reasoning-*` (thinking), `tool-input-*` (tool_use, server_tool_use), their
 *   ids `<iteration>-<block index>`; a turn without `stream.event`s (`"stream": false`) is rendered from its
 *   `turn.completed` message.
 * - `tool.completed` → `tool-output-available` / `tool-output-error`; a denial → `tool-output-denied`.
 * - `turn.dropped` (an interrupt, a retry, a max-tokens retry) and a turn started again without having completed
 *   (a run taken over after a crash) → `reset-step` (the SDK drops the parts of the current step) and a transient
 *   `data-turn-dropped` chunk `{iteration, reason}`.
 * - `session.status`: `requires_action` → a `tool-approval-request` per call awaiting approval (its `approvalId` is
 *   the tool_use id), or the client tool calls left as `input-available` for `addToolOutput`; then `finish`.
 *   `idle` → `finish` with the stop reason mapped; `failed` → `error`, then `finish` (`error`).
 * - `session.deleted` → `abort`.
 */
import { z } from 'zod';
import { compareIds } from '../events/cursor.js';

/** One UI message chunk (the `ai` package's `UIMessageChunk`), as JSON. */
export type UIChunk = { type: string } & Record<string, unknown>;

type FinishReason = 'stop' | 'length' | 'content-filter' | 'tool-calls' | 'error' | 'interrupted' | 'other';

/** The stop reasons of spec §2 as the SDK's finish reasons. */
function finishReason(stopReason: string | null | undefined): FinishReason {
  switch (stopReason) {
    case 'end_turn':
    case 'stop_sequence':
      return 'stop';
    case 'max_tokens':
      return 'length';
    case 'refusal':
      return 'content-filter';
    case 'cancelled':
      return 'interrupted';
    default:
      return 'other';
  }
}

const block = z.looseObject({
  type: z.string(),
  id: z.string().optional(),
  name: z.string().optional(),
  input: z.unknown().optional(),
  text: z.string().optional(),
  thinking: z.string().optional(),
  tool_use_id: z.string().optional(),
  content: z.unknown().optional(),
});
type Block = z.infer<typeof block>;

const streamEvent = z.object({
  iteration: z.number(),
  event: z.looseObject({
    type: z.string(),
    index: z.number().optional(),
    content_block: block.optional(),
    delta: z
      .looseObject({
        type: z.string(),
        text: z.string().optional(),
        thinking: z.string().optional(),
        partial_json: z.string().optional(),
      })
      .optional(),
  }),
});
const turnStarted = z.looseObject({ iteration: z.number() });
const turnCompleted = z.looseObject({
  iteration: z.number(),
  message: z.looseObject({ content: z.array(block) }),
});
const toolCompleted = z.looseObject({
  tool_use_id: z.string(),
  name: z.string(),
  input: z.unknown(),
  content: z.unknown(),
  is_error: z.boolean().optional(),
});
const decided = z.looseObject({ tool_use_id: z.string(), decision: z.string() });
const dropped = z.looseObject({ iteration: z.number().optional(), reason: z.string().optional() });
const call = z.object({ id: z.string(), name: z.string(), input: z.unknown() });
const status = z.looseObject({
  status: z.string(),
  required_action: z.looseObject({ type: z.string(), tool_calls: z.array(call) }).nullish(),
  stop_reason: z.string().nullish(),
  error: z.looseObject({ code: z.string(), message: z.string() }).nullish(),
});

/** What an open content block of the turn became. */
interface OpenBlock {
  kind: 'text' | 'reasoning' | 'tool';
  id: string;
  name: string;
  json: string;
  providerExecuted: boolean;
}

/** The text of a tool result's content (a string, or blocks whose text is joined). */
export function resultText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content
      .map((b: unknown) =>
        typeof b === 'object' && b !== null && 'text' in b && typeof b.text === 'string' ? b.text : '',
      )
      .join('');
  return JSON.stringify(content ?? null);
}

const parseJson = (text: string): unknown => {
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
};

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
  /** Tool calls the client's message holds already (so outputs may refer to them). */
  private readonly known: Set<string>;
  private readonly denied = new Set<string>();

  /**
   * `messageId`: the assistant message the stream continues (its `start` names it); `known`: the tool calls the
   * client's message holds; `pausedBefore`: the id of the current run's first event, for a replay of the whole
   * assistant message: a `requires_action` before it is a pause the client answered, which does not end the stream.
   */
  constructor(
    private readonly messageId: string | undefined,
    known: Iterable<string> = [],
    private readonly pausedBefore?: string,
  ) {
    this.known = new Set(known);
  }

  /**
   * The revision the request's own writes reached: `session.status` events of lower revisions are passed over. A
   * chat request may write several times before its stream (one decision per approval answered), and the statuses
   * in between (`requires_action` with the calls not decided yet) are not where the run stands.
   */
  statusFrom = 0;

  /** The first chunk of the stream. */
  start(): UIChunk[] {
    return [this.messageId ? { type: 'start', messageId: this.messageId } : { type: 'start' }];
  }

  /** The chunks of one event of the log (none for the events a chat does not show). */
  event(type: string, data: unknown, id = '', revision: number | null = null): UIChunk[] {
    if (this.done) return [];
    switch (type) {
      case 'turn.started':
        return this.turnStarted(turnStarted.safeParse(data).data?.iteration ?? this.iteration + 1);
      case 'stream.event': {
        const ev = streamEvent.safeParse(data);
        return ev.success ? this.streamEvent(ev.data) : [];
      }
      case 'turn.completed': {
        const ev = turnCompleted.safeParse(data);
        return ev.success ? this.turnCompleted(ev.data.message.content) : [];
      }
      case 'tool.completed': {
        const ev = toolCompleted.safeParse(data);
        return ev.success ? this.toolCompleted(ev.data) : [];
      }
      case 'tool_call.decided': {
        const ev = decided.safeParse(data);
        if (!ev.success || ev.data.decision !== 'deny') return [];
        this.denied.add(ev.data.tool_use_id);
        return this.known.has(ev.data.tool_use_id)
          ? [{ type: 'tool-output-denied', toolCallId: ev.data.tool_use_id }]
          : [];
      }
      case 'turn.dropped': {
        const ev = dropped.safeParse(data).data;
        return this.reset(ev?.reason ?? 'dropped', ev?.iteration ?? this.iteration);
      }
      case 'session.status': {
        if (revision !== null && revision < this.statusFrom) return [];
        const ev = status.safeParse(data);
        const paused = this.pausedBefore !== undefined && id !== '' && compareIds(id, this.pausedBefore) < 0;
        return ev.success ? this.status(ev.data, paused) : [];
      }
      case 'session.deleted':
        this.done = true;
        return [{ type: 'abort', reason: 'session_deleted' }];
      default:
        return [];
    }
  }

  /** The end of a stream cut short (the log could not be read): an `error`, then `finish`. */
  fail(message: string): UIChunk[] {
    if (this.done) return [];
    return [{ type: 'error', errorText: message }, ...this.finish('error')];
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
      const providerExecuted = cb.type === 'server_tool_use';
      this.open.set(index, { kind: 'tool', id: cb.id, name: cb.name, json: '', providerExecuted });
      this.known.add(cb.id);
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
    return [
      {
        type: 'tool-input-available',
        toolCallId: b.id,
        toolName: b.name,
        input,
        ...(b.providerExecuted ? { providerExecuted: true } : {}),
      },
    ];
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

  private turnCompleted(content: Block[]): UIChunk[] {
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
        out.push(...this.blockStart(index, cb));
        const b = this.open.get(index);
        if (!b) return;
        const text = b.kind === 'text' ? cb.text : b.kind === 'reasoning' ? cb.thinking : undefined;
        if (text)
          out.push({ type: b.kind === 'text' ? 'text-delta' : 'reasoning-delta', id: b.id, delta: text });
        out.push(...this.blockEnd(b, cb.input ?? {}));
        this.open.delete(index);
      });
    }
    this.turnOpen = false;
    return out;
  }

  /** A call the client's message may not hold (a stream resumed mid-run): its input first. */
  private ensureCall(c: { id: string; name: string; input: unknown }): UIChunk[] {
    if (this.known.has(c.id)) return [];
    this.known.add(c.id);
    return [{ type: 'tool-input-available', toolCallId: c.id, toolName: c.name, input: c.input }];
  }

  private toolCompleted(ev: z.infer<typeof toolCompleted>): UIChunk[] {
    if (this.denied.has(ev.tool_use_id)) return [];
    const out = this.ensureCall({ id: ev.tool_use_id, name: ev.name, input: ev.input });
    out.push(
      ev.is_error
        ? { type: 'tool-output-error', toolCallId: ev.tool_use_id, errorText: resultText(ev.content) }
        : { type: 'tool-output-available', toolCallId: ev.tool_use_id, output: ev.content ?? null },
    );
    return out;
  }

  private status(ev: z.infer<typeof status>, paused: boolean): UIChunk[] {
    if (ev.status === 'running') return [];
    if (ev.status === 'failed') {
      const e = ev.error;
      return this.fail(e ? `${e.code}: ${e.message}` : 'The run failed.');
    }
    if (ev.status === 'requires_action') {
      const out: UIChunk[] = [];
      const action = ev.required_action;
      for (const c of action?.tool_calls ?? []) {
        out.push(...this.ensureCall(c));
        if (action?.type === 'approve_tool_calls')
          out.push({ type: 'tool-approval-request', approvalId: c.id, toolCallId: c.id });
      }
      return paused ? out : [...out, ...this.finish('tool-calls')];
    }
    return this.finish(finishReason(ev.stop_reason));
  }

  private finish(reason: FinishReason): UIChunk[] {
    this.done = true;
    const out: UIChunk[] = this.stepOpen ? [{ type: 'finish-step' }] : [];
    this.stepOpen = false;
    out.push({ type: 'finish', finishReason: reason });
    return out;
  }
}
