/**
 * What the chat translator (chunks.ts) reads of a session's events: the shapes of their data (parsed loosely: a
 * field the translator does not read may be anything), and the small conversions it makes of them.
 */
import { z } from 'zod';

export type FinishReason =
  'stop' | 'length' | 'content-filter' | 'tool-calls' | 'error' | 'interrupted' | 'other';

/** The stop reasons of spec §2 as the SDK's finish reasons. */
export function finishReason(stopReason: string | null | undefined): FinishReason {
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
export type Block = z.infer<typeof block>;

export const streamEvent = z.object({
  iteration: z.number(),
  event: z.looseObject({
    type: z.string(),
    index: z.number().optional(),
    content_block: block.optional(),
    delta: z
      .looseObject({
        // A block's delta has a type; `message_delta`'s has the reply's `stop_reason` instead.
        type: z.string().optional(),
        text: z.string().optional(),
        thinking: z.string().optional(),
        partial_json: z.string().optional(),
        stop_reason: z.string().nullish(),
      })
      .optional(),
  }),
});
export const turnStarted = z.looseObject({ iteration: z.number() });
export const turnCompleted = z.looseObject({
  iteration: z.number(),
  message: z.looseObject({ content: z.array(block), stop_reason: z.string().nullish() }),
});
export const toolCompleted = z.looseObject({
  tool_use_id: z.string(),
  name: z.string(),
  input: z.unknown(),
  content: z.unknown(),
  is_error: z.boolean().optional(),
});
/** `tool_call.decided`; `input`: an approval's edited input (absent when the call runs as the model made it). */
export const decided = z.looseObject({
  tool_use_id: z.string(),
  decision: z.string(),
  input: z.unknown().optional(),
  reason: z.string().nullish(),
});
/** `tool_result.replaced`: a result under review replaced (`PUT …/tool-results/:id`), the one the model gets. */
export const replaced = z.looseObject({
  tool_use_id: z.string(),
  content: z.unknown(),
  is_error: z.boolean().optional(),
});
/** `message.appended`: the queued follow-ups merged into the history (only what the translator reads of it). */
export const appended = z.looseObject({
  role: z.string(),
  into_last: z.boolean().optional(),
  content: z.array(block),
});

/**
 * Whether block `b` of a user turn shows as a part of a user message (src/chat/history.ts `userPart`, which answers
 * with a part for exactly these): text; an image with a `base64` or `url` source; a document with a `base64`, `url`
 * or `text` source. Other blocks show nothing of their own: tool results, and an image or a document whose source
 * the chat has no file part for (POST /v1/sessions/:id/messages takes a document of source `content` or `file`, an
 * image of source `file`), which the model gets but the chat does not show. A user turn with none of them is no user
 * message of the chat: the replies after it continue the assistant message before it. The one test of a user turn
 * wherever the chat counts them (`asksUser`, src/chat/record.ts `isUserTurn`, src/engine/compaction.ts
 * `endsWithUserTurn`), and src/chat/lua/run-start-2.lua `asks` makes the same one.
 */
export function isUserBlock(b: { readonly type: string }): boolean {
  const rec: Readonly<Record<string, unknown>> = b;
  if (b.type === 'text') return typeof rec['text'] === 'string';
  if (b.type !== 'image' && b.type !== 'document') return false;
  const source = rec['source'];
  if (typeof source !== 'object' || source === null) return false;
  const src = source as Record<string, unknown>;
  switch (src['type']) {
    case 'base64':
      return typeof src['media_type'] === 'string' && typeof src['data'] === 'string';
    case 'url':
      return typeof src['url'] === 'string';
    case 'text':
      return b.type === 'document' && typeof src['data'] === 'string';
    default:
      return false;
  }
}

/**
 * A user turn the history shows as a user message (src/chat/history.ts `userPart`): one with a block among those
 * added that shows as a part (`isUserBlock`). The same test as src/chat/lua/run-start-2.lua `asks`.
 */
export const asksUser = (ev: z.infer<typeof appended>): boolean =>
  ev.role === 'user' && ev.content.some(isUserBlock);

export const dropped = z.looseObject({ iteration: z.number().optional(), reason: z.string().optional() });
const call = z.object({ id: z.string(), name: z.string(), input: z.unknown() });
export const status = z.looseObject({
  status: z.string(),
  required_action: z.looseObject({ type: z.string(), tool_calls: z.array(call) }).nullish(),
  stop_reason: z.string().nullish(),
  error: z.looseObject({ code: z.string(), message: z.string() }).nullish(),
});

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

export const parseJson = (text: string): unknown => {
  if (text.trim() === '') return {};
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return text;
  }
};

/**
 * The stop reasons after which the run goes on (src/engine/turns.ts `turn`): any other one ends the run with the
 * reply's calls not run.
 */
export const GOES_ON = new Set(['tool_use', 'pause_turn', 'compaction']);

/**
 * A `required_action` that waits only for sub-agents' results: the service answers them (src/agents/sweep.ts) and
 * the run goes on without the client, so a chat stream goes on through it.
 */
export function awaitsAgentsOnly(
  action: { type: string; tool_calls: ReadonlyArray<{ name: string }> } | null | undefined,
  agents: ReadonlySet<string>,
): boolean {
  return (
    action?.type === 'submit_tool_results' &&
    action.tool_calls.length > 0 &&
    action.tool_calls.every((c) => agents.has(c.name))
  );
}

/** A denial's reason as the `tool-approval-response` chunk carries it (absent when none was given). */
export const reasonOf = (reason: unknown): { reason?: string } =>
  typeof reason === 'string' && reason !== '' ? { reason } : {};
