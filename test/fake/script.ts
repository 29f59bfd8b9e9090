/** Small builders for fake replies, and the named scripts of the standalone fake (`--script`). */
import type {
  FakeBlock,
  FakeErrorReply,
  FakeHandler,
  FakeMessageReply,
  FakeReply,
} from '../../src/offline/wire.js';
import { availableTools, offlineHandler } from '../../src/offline/model.js';

export { availableTools };

/** Reply options other than `type` and `content`. */
export type ReplyExtra = Partial<Omit<FakeMessageReply, 'type' | 'content'>>;
/** Error options other than `type`, `status` and `errorType`. */
export type ErrorExtra = Partial<Omit<FakeErrorReply, 'type' | 'status' | 'errorType'>>;

/** A text block. */
export function textBlock(text: string): FakeBlock {
  return { type: 'text', text };
}

/** A `tool_use` block; the fake makes up a `toolu_…` id unless `id` is given. */
export function toolUse(name: string, input: unknown, id?: string): FakeBlock {
  return id === undefined ? { type: 'tool_use', name, input } : { type: 'tool_use', id, name, input };
}

/** A thinking block (streamed as `thinking_delta`s and a `signature_delta`). */
export function thinking(text: string): FakeBlock {
  return { type: 'thinking', thinking: text };
}

/** A message reply with `content` (a string becomes one text block). */
export function reply(content: FakeBlock[] | string, extra: ReplyExtra = {}): FakeMessageReply {
  return { ...extra, type: 'message', content: typeof content === 'string' ? [textBlock(content)] : content };
}

/** A message reply of one text block, stopping with `end_turn` unless `extra.stop_reason`. */
export function text(t: string, extra: ReplyExtra = {}): FakeMessageReply {
  return reply([textBlock(t)], extra);
}

/** A reply calling one tool (`stop_reason: tool_use`). */
export function toolCall(
  name: string,
  input: unknown,
  extra: ReplyExtra & { id?: string } = {},
): FakeMessageReply {
  const { id, ...rest } = extra;
  return reply([toolUse(name, input, id)], rest);
}

/** A reply calling several tools at once (parallel calls), optionally after some text. */
export function toolCalls(
  blocks: FakeBlock[],
  extra: ReplyExtra & { preamble?: string } = {},
): FakeMessageReply {
  const { preamble, ...rest } = extra;
  return reply(preamble === undefined ? blocks : [textBlock(preamble), ...blocks], rest);
}

/** The tokens of one model's attempt at a reply (an entry of `usage.iterations`). */
export interface AttemptUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens?: number;
  cache_read_input_tokens?: number;
}

/**
 * Reply options of a reply a fallback model served (a request with `fallbacks`), as the API reports one: its `model`
 * is the fallback's, `usage.iterations` holds a `message` entry for each model that declined (`declined`) and the
 * fallback's `fallback_message` entry last, and the top-level usage adds them all up.
 */
export function servedByFallback(
  fallback: { model: string; usage: AttemptUsage },
  declined: Array<{ model: string; usage: AttemptUsage }> = [],
): ReplyExtra {
  const entry = (type: 'message' | 'fallback_message', model: string, u: AttemptUsage) => ({
    type,
    model,
    input_tokens: u.input_tokens,
    output_tokens: u.output_tokens,
    cache_creation_input_tokens: u.cache_creation_input_tokens ?? 0,
    cache_read_input_tokens: u.cache_read_input_tokens ?? 0,
    cache_creation: null,
  });
  const iterations = [
    ...declined.map((d) => entry('message', d.model, d.usage)),
    entry('fallback_message', fallback.model, fallback.usage),
  ];
  const sum = (k: keyof AttemptUsage) => iterations.reduce((n, e) => n + e[k], 0);
  return {
    model: fallback.model,
    usage: {
      input_tokens: sum('input_tokens'),
      output_tokens: sum('output_tokens'),
      cache_creation_input_tokens: sum('cache_creation_input_tokens'),
      cache_read_input_tokens: sum('cache_read_input_tokens'),
      iterations,
    },
  };
}

/** An HTTP error reply with the API's error envelope. */
export function apiError(status: number, errorType: string, extra: ErrorExtra = {}): FakeErrorReply {
  return { ...extra, type: 'error', status, errorType };
}

/** `429 rate_limit_error`, with `retry-after: <seconds>` when given. */
export function rateLimited(retryAfter?: number, extra: ErrorExtra = {}): FakeErrorReply {
  return apiError(429, 'rate_limit_error', retryAfter === undefined ? extra : { retryAfter, ...extra });
}

/** `529 overloaded_error`. */
export function overloaded(extra: ErrorExtra = {}): FakeErrorReply {
  return apiError(529, 'overloaded_error', extra);
}

/** `500 api_error`. */
export function serverError(extra: ErrorExtra = {}): FakeErrorReply {
  return apiError(500, 'api_error', extra);
}

/** Never answer; the request ends when the client disconnects. */
export function hang(): FakeReply {
  return { type: 'hang' };
}

/** What a `tool-loop` turn holds besides its call: a `sleep` tool's `ms`, and a sentence after the call. */
export interface ToolLoopShape {
  /** `{ms}` as the call's input (the test-only `sleep` tools). */
  ms?: number;
  /** The reply goes on with a sentence after the call, as a model that explains what it waits for. */
  textAfter?: boolean;
}

/** The sentence after the call of a `tool-loop` turn with `textAfter`: four text deltas. */
export const TOOL_LOOP_TEXT_AFTER = 'I am waiting for that tool to finish before I go on with the next step.';

/**
 * A deterministic benchmark script: `n - 1` turns calling a cheap tool, then a final text. The turn is the number of
 * assistant messages in the conversation the model saw, so it works with and without threads and across sessions.
 * The tool is `toolName`, else `calculate_sum` if offered, else the first offered tool, else `calculate_sum`.
 */
export function toolLoopHandler(n: number, toolName?: string, shape: ToolLoopShape = {}): FakeHandler {
  return (req) => {
    const turn = req.messages.filter((message) => message?.role === 'assistant').length;
    if (turn >= n - 1) return text(`Finished after ${n} turns.`);
    const offered = availableTools(req);
    const name =
      toolName ??
      (offered.has('calculate_sum') ? 'calculate_sum' : offered.keys().next().value) ??
      'calculate_sum';
    const input =
      name === 'calculate_sum' ? { a: turn + 1, b: 1 } : shape.ms !== undefined ? { ms: shape.ms } : {};
    if (shape.textAfter) return reply([toolUse(name, input), textBlock(TOOL_LOOP_TEXT_AFTER)]);
    return toolCall(name, input);
  };
}

/**
 * A model at realistic pacing (bench B9): `turns - 1` turns of text then a calculate_sum call, then a final text;
 * each reply streams `eventDelayMs` apart, its text in `min`..`max` deltas (chosen per conversation and turn, so a
 * turn lasts `min`..`max` times the delay). Delta k's text starts with `#k`; delta 0 carries the time the reply
 * was built as `s<ms since epoch>`, so a reader can tell each delta's lateness from the fake's schedule: delta k is
 * the reply's event k + 3 (after `message_start`, `ping`, `content_block_start`), written (k + 4) × delay after it.
 */
export function pacedHandler(turns: number, min: number, max: number, eventDelayMs: number): FakeHandler {
  return (req) => {
    const turn = req.messages.filter((message) => message?.role === 'assistant').length;
    const first: unknown = req.messages[0]?.content;
    const tag = typeof first === 'string' ? first : JSON.stringify(first ?? '');
    let h = turn * 7919;
    for (let i = 0; i < tag.length; i++) h = (h * 31 + tag.charCodeAt(i)) >>> 0;
    const deltas = min + (h % (max - min + 1));
    const words = [`#0 s${Date.now()} y`];
    for (let k = 1; k < deltas; k++) words.push(`#${k} x y`);
    const body = `${words.join(' ')} `;
    if (turn >= turns - 1) return text(body, { eventDelayMs });
    return reply([textBlock(body), toolUse('calculate_sum', { a: turn + 1, b: 1 })], { eventDelayMs });
  };
}

/**
 * The handler of a named script: `offline`, `tool-loop:N[:toolName[:ms[:text]]]` (`ms`: the call's input is
 * `{ms}`; `text`: a sentence follows the call in each turn), or `paced:TURNS:MIN:MAX:DELAY_MS` (pacedHandler).
 */
export function parseScript(spec: string): FakeHandler {
  if (spec === 'offline') return offlineHandler;
  // Anchored, and no two quantifiers can match the same characters: linear time.
  const loop = /^tool-loop:(\d+)(?::([\w-]+)(?::(\d+)(:text)?)?)?$/.exec(spec);
  if (loop) {
    const n = Number(loop[1]);
    if (n < 1) throw new Error(`tool-loop needs N >= 1, got ${spec}`);
    const shape: ToolLoopShape = {
      ...(loop[3] !== undefined ? { ms: Number(loop[3]) } : {}),
      ...(loop[4] ? { textAfter: true } : {}),
    };
    return toolLoopHandler(n, loop[2], shape);
  }
  const paced = /^paced:(\d+):(\d+):(\d+):(\d+)$/.exec(spec);
  if (paced) {
    const [turns, min, max, delay] = paced.slice(1).map(Number) as [number, number, number, number];
    if (turns < 1 || min < 1 || max < min)
      throw new Error(`paced needs TURNS >= 1 and 1 <= MIN <= MAX: ${spec}`);
    return pacedHandler(turns, min, max, delay);
  }
  throw new Error(
    `unknown fake script ${JSON.stringify(spec)}; expected offline, tool-loop:N[:tool[:ms[:text]]] or paced:TURNS:MIN:MAX:DELAY_MS`,
  );
}
