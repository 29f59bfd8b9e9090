import type {
  BetaContentBlock,
  BetaContentBlockParam,
  BetaStopReason,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { z } from 'zod';
import { EVENT_TYPES } from '../webhooks/schemas.js';

/**
 * The `data` of every event type (docs/API.md §5.2), as zod schemas: the OpenAPI document's `Event` is a `oneOf` of
 * them discriminated by `type` (src/openapi/responses.ts), event pages are checked against them before they are
 * sent (src/openapi/serializer.ts), and `eventData()` types the emit sites written in TypeScript by them, so a
 * field an emit site adds or drops fails the type check or the response check. Events written by Lua (the
 * `rev`-stamped `iteration.persisted`, `message.appended`, `session.deleted`, schedules) are checked by
 * test/openapi/openapi-events.test.ts, which validates the events of real sessions against openapi.json.
 *
 * Every object is loose: a field added later reaches clients before the schema names it.
 *
 * Past 400 lines: one schema per event type, in the one table the OpenAPI document, the response check and the emit
 * sites share.
 */

/**
 * Content block types of the SDK's own unions (`BetaContentBlock` of replies, `BetaContentBlockParam` of
 * requests, both stored in a history). `KnownBlockType` below fails the type check when an SDK upgrade adds one.
 */
const BLOCK_TYPES = [
  'text',
  'image',
  'document',
  'search_result',
  'thinking',
  'redacted_thinking',
  'tool_use',
  'tool_result',
  'server_tool_use',
  'web_search_tool_result',
  'web_fetch_tool_result',
  'advisor_tool_result',
  'code_execution_tool_result',
  'bash_code_execution_tool_result',
  'text_editor_code_execution_tool_result',
  'tool_search_tool_result',
  'mcp_tool_use',
  'mcp_tool_result',
  'container_upload',
  'compaction',
  'fallback',
  'mcp_tool_listing',
  'tool_addition',
  'tool_removal',
] as const;
type SdkBlockType = BetaContentBlock['type'] | BetaContentBlockParam['type'];
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
/** Compile-time: BLOCK_TYPES is exactly the SDK's set. */
const blockTypesMatchSdk: Same<(typeof BLOCK_TYPES)[number], SdkBlockType> = true;
void blockTypesMatchSdk;

/** Stop reasons of the SDK's `BetaStopReason` (checked at compile time, as above). */
const STOP_REASONS = [
  'end_turn',
  'max_tokens',
  'stop_sequence',
  'tool_use',
  'pause_turn',
  'compaction',
  'refusal',
  'model_context_window_exceeded',
] as const;
const stopReasonsMatchSdk: Same<(typeof STOP_REASONS)[number], BetaStopReason> = true;
void stopReasonsMatchSdk;

/**
 * A stop reason: one of the SDK's, or a newer one the Messages API added (the service stores what the API sent,
 * so the document cannot close the set; a client switches on the known values and keeps a default branch).
 */
export const stopReason = z
  .union([
    z.enum(STOP_REASONS).meta({ id: 'KnownStopReason' }),
    z
      .string()
      .meta({ description: 'A stop reason the Messages API added after this version of the document.' }),
  ])
  .meta({ id: 'StopReason', description: "The reply's `stop_reason` (the SDK's `BetaStopReason`)." });

/** The fields each block type is known to carry (the SDK's types); the others pass through. */
const blockFields: Partial<Record<(typeof BLOCK_TYPES)[number], z.ZodRawShape>> = {
  text: { text: z.string() },
  thinking: { thinking: z.string() },
  tool_use: { id: z.string(), name: z.string(), input: z.unknown() },
  server_tool_use: { id: z.string(), name: z.string(), input: z.unknown() },
  mcp_tool_use: { id: z.string(), name: z.string(), input: z.unknown() },
  tool_result: {
    tool_use_id: z.string(),
    content: z.unknown().optional(),
    is_error: z.boolean().optional(),
  },
  web_search_tool_result: { tool_use_id: z.string(), content: z.unknown() },
  compaction: { content: z.string().nullable() },
};

const pascal = (t: string) =>
  t
    .split('_')
    .map((p) => (p === 'mcp' ? 'MCP' : p[0]!.toUpperCase() + p.slice(1)))
    .join('');

/** The members of a union built by `map` (zod wants a non-empty tuple). */
export function nonEmpty<T>(xs: T[]): [T, ...T[]] {
  const [first, ...rest] = xs;
  if (first === undefined) throw new Error('a union needs a member');
  return [first, ...rest];
}

/** `{propertyName, mapping}` of a `oneOf` whose members are components named `name(value)`. */
export const discriminator = (values: readonly string[], name: (v: string) => string) => ({
  propertyName: 'type',
  mapping: Object.fromEntries(values.map((v) => [v, `#/components/schemas/${name(v)}`])),
});

const blockId = (t: string) => `${pascal(t)}Block`;
const knownBlock = z
  .discriminatedUnion(
    'type',
    nonEmpty(
      BLOCK_TYPES.map((t) =>
        z.looseObject({ type: z.literal(t), ...blockFields[t] }).meta({ id: blockId(t) }),
      ),
    ),
  )
  .meta({ id: 'KnownContentBlock', discriminator: discriminator(BLOCK_TYPES, blockId) });

const KNOWN = new Set<string>(BLOCK_TYPES);
/** A block of a type newer than the SDK the service runs (the API may add them; the service passes them on). */
const otherBlock = z
  .looseObject({
    type: z
      .string()
      .refine((t) => !KNOWN.has(t))
      .meta({ not: { enum: [...BLOCK_TYPES] } }),
  })
  .meta({ id: 'OtherContentBlock' });

export const contentBlock = z.union([knownBlock, otherBlock]).meta({
  id: 'ContentBlock',
  description:
    "A content block of the Messages API: one of the SDK's block types (`KnownContentBlock`, discriminated by `type`), or a newer type (`OtherContentBlock`).",
});

const content = z.union([z.string(), z.array(contentBlock)]);
/** A Messages API message as stored in the history (`{role, content}`). */
export const messageParam = z
  .looseObject({ role: z.enum(['user', 'assistant', 'system']), content })
  .meta({ id: 'MessageParam' });

const usageCounts = z.looseObject({
  input_tokens: z.number(),
  output_tokens: z.number(),
});
/** The whole reply, as the SDK returns it (`BetaMessage`). */
export const betaMessage = z
  .looseObject({
    id: z.string(),
    type: z.literal('message'),
    role: z.literal('assistant'),
    model: z.string(),
    content: z.array(contentBlock),
    stop_reason: stopReason.nullable(),
    usage: usageCounts,
  })
  .meta({ id: 'BetaMessage' });

const toolContent = z.unknown().meta({ description: 'A tool result: a string or content blocks.' });
/** Who made the change: a client token (spec §7.2), or the service itself. A tenant key's changes carry none. */
const by = z
  .string()
  .optional()
  .meta({
    description:
      "Who did it: a client token's `subject` (its `id`, `ctk_…`, when minted without one), or `timeout` when an " +
      'action deadline denied the call (`tool_call.decided`), which no subject may be. Absent for a tenant key.',
  });
const iteration = z.number().int().meta({ description: 'Model turns (a compaction is not one).' });
/** The record number of an iteration record (`GET …/iterations/:n`): turns and compactions in order, from 1. */
const recordNumber = z
  .number()
  .int()
  .meta({ description: 'The iteration record number (`GET …/iterations/:n`).' });
const requiredActionType = z.enum([
  'approve_tool_calls',
  'review_tool_results',
  'submit_tool_results',
  'review_turn',
]);
const actionData = {
  type: requiredActionType.nullable(),
  tool_use_ids: z.array(z.string()),
  expires_at: z.string().nullable(),
  action_timeout_s: z.number().nullable(),
};
const sessionErrorData = { code: z.string(), message: z.string(), retryable: z.boolean() };

export type EventType = (typeof EVENT_TYPES)[number];

/** `data` per event type; `session.created`'s is the session resource, given by the caller (no import cycle). */
export function eventDataSchemas(session: z.ZodType) {
  return {
    'session.created': session,
    'session.updated': z.looseObject({}).meta({ description: 'The PATCH body (or what a route changed).' }),
    'session.deleted': z.looseObject({ id: z.string(), reason: z.literal('expired').optional() }),
    'session.status': z.looseObject({
      status: z.enum(['running', 'requires_action', 'idle', 'failed']),
      required_action: z.looseObject({ type: requiredActionType }).nullable(),
      stop_reason: stopReason.nullable(),
      error: z.looseObject(sessionErrorData).nullable(),
    }),
    'session.error': z.looseObject(sessionErrorData),
    'session.cancel_requested': z.looseObject({}),
    'turn.started': z.looseObject({ iteration, message_count: z.number().int() }),
    'turn.completed': z.looseObject({ iteration, message: betaMessage, usage: z.looseObject({}) }),
    'turn.dropped': z.looseObject({
      iteration,
      reason: z.enum(['retry', 'interrupt', 'max_tokens_retry', 'takeover', 'stream_cut']),
    }),
    'stream.event': z.looseObject({
      iteration,
      event: z.looseObject({ type: z.string() }).meta({ description: 'A raw Messages API stream event.' }),
    }),
    'tool.started': z.looseObject({ tool_use_id: z.string(), name: z.string() }),
    'tool.progress': z.looseObject({
      tool_use_id: z.string(),
      name: z.string(),
      progress: z.number(),
      total: z.number().optional(),
      message: z.string().optional(),
    }),
    'tool.completed': z.looseObject({
      tool_use_id: z.string(),
      name: z.string(),
      input: z.unknown(),
      content: toolContent,
      is_error: z.boolean(),
      duration_ms: z.number().nullable(),
    }),
    'tool_task.retried': z.looseObject({
      tool_use_id: z.string(),
      name: z.string(),
      attempt: z.number().int(),
      next_attempt: z.number().int(),
      /** `lease_expired` (the claimant's lease lapsed), or `http_failed` (an http tool's try failed: `error`). */
      reason: z.string(),
      /** An `http_failed` try's failure: `HTTP 500`, `timeout after 30000 ms`, `ECONNREFUSED`, … */
      error: z.string().optional(),
    }),
    'iteration.persisted': z.looseObject({
      iteration,
      n: recordNumber,
      kind: z.literal('compaction').optional(),
      revision: z.number().int().nullable(),
    }),
    'message.queued': z.looseObject({ message: messageParam, interrupt: z.boolean().optional(), by }),
    'message.appended': z.looseObject({
      index: z.number().int(),
      into_last: z.boolean(),
      role: z.enum(['user', 'assistant', 'system']),
      content: z.array(contentBlock),
    }),
    'messages.replaced': z.looseObject({ message_count: z.number().int() }),
    'tool_call.decided': z.looseObject({
      tool_use_id: z.string(),
      decision: z.enum(['approve', 'deny']),
      input: z.unknown().optional(),
      reason: z.string().optional(),
      by,
    }),
    'tool_result.submitted': z.looseObject({
      tool_use_id: z.string(),
      content: toolContent,
      is_error: z.boolean(),
    }),
    'tool_result.replaced': z.looseObject({
      tool_use_id: z.string(),
      content: toolContent,
      is_error: z.boolean(),
    }),
    'params.updated': z.looseObject({
      params: z.looseObject({}),
      reason: z.literal('max_tokens_retry').optional(),
    }),
    'tools.updated': z.looseObject({
      tools: z.array(z.unknown()),
      added: z.array(z.string()),
      removed: z.array(z.string()),
      applies: z.literal('next_turn'),
    }),
    'tools.applied': z.looseObject({
      message_index: z.number().int(),
      added: z.array(z.string()),
      removed: z.array(z.string()),
    }),
    'compaction.started': z.looseObject({ iteration, n: recordNumber, message_count: z.number().int() }),
    'compaction.completed': z.looseObject({
      iteration,
      n: recordNumber,
      summarized_messages: z.number().int(),
      message: betaMessage,
    }),
    'compaction.skipped': z.looseObject({ iteration, n: recordNumber, reason: z.string() }),
    'schedule.created': z.looseObject({
      schedule_id: z.string(),
      cron: z.string().nullable(),
      at: z.string().nullable(),
      timezone: z.string(),
      overlap: z.enum(['skip', 'allow']),
      paused: z.boolean(),
      next_run_at: z.string().nullable(),
    }),
    'schedule.deleted': z.looseObject({ schedule_id: z.string() }),
    'schedule.fired': z.looseObject({
      schedule_id: z.string(),
      scheduled_for: z.string(),
      session_id: z.string(),
      late_ms: z.number(),
    }),
    'schedule.updated': z.looseObject({
      schedule_id: z.string(),
      fields: z.array(z.string()),
    }),
    'schedule.skipped': z.looseObject({
      schedule_id: z.string(),
      scheduled_for: z.string(),
      reason: z.string(),
      error: z.unknown().optional(),
    }),
    // A client token minted for the session or revoked (never the token itself).
    'client_token.created': z.looseObject({
      id: z.string(),
      scopes: z.array(z.string()),
      subject: z.string().nullable(),
      expires_at: z.string(),
    }),
    'client_token.revoked': z.looseObject({ id: z.string() }),
    'action.expiring': z.looseObject(actionData),
    'action.timed_out': z.looseObject({ ...actionData, on_action_timeout: z.enum(['deny', 'fail']) }),
    // The descendants waiting for a client, as the parent's `required_action.children_waiting` (src/agents/waiting.ts).
    'children.waiting': z.looseObject({
      children_waiting: z.array(
        z.looseObject({
          session_id: z.string(),
          tool_use_id: z.string(),
          required_action: z.looseObject({}),
        }),
      ),
    }),
  } satisfies Record<EventType, z.ZodType>;
}

/**
 * A loose schema's input type without its index signatures: an SDK interface (`BetaTextBlock`, …) declares none,
 * so TypeScript would not assign it to `{[k: string]: unknown, type: string}`, though the schema accepts it. The
 * known keys are still checked.
 */
type Known<T> = T extends readonly (infer U)[]
  ? Known<U>[]
  : T extends object
    ? { [K in keyof T as string extends K ? never : K]: Known<T[K]> }
    : T;

type DataInput<T extends EventType> = z.input<ReturnType<typeof eventDataSchemas>[T]>;

/**
 * The data of an event of type T, as the emit sites build it: the top level keeps its index signature (a site may
 * add a key its schema leaves open, as `tool.started`'s `input`), the levels below are `Known`.
 */
export type EventData<T extends EventType> = { [K in keyof DataInput<T>]: Known<DataInput<T>[K]> };

/** An event to append, `[type, data as JSON]`, its data typed by the event's schema. */
export const eventOf = <T extends Exclude<EventType, 'session.created'>>(
  type: T,
  data: EventData<T>,
): [T, string] => [type, JSON.stringify(data)];

/** Types whose data carries the session's `revision` (null until the write that makes it knows it). */
type RevisedType = {
  [T in Exclude<EventType, 'session.created'>]: EventData<T> extends { revision: number | null } ? T : never;
}[Exclude<EventType, 'session.created'>];

/**
 * An event whose `"revision":null` the apply script replaces with the revision it writes (`[type, data, 'rev']`,
 * src/store/apply-ops.ts): its data typed by the event's schema, with `revision: null` as the script expects.
 */
export const eventAtRevision = <T extends RevisedType>(
  type: T,
  data: EventData<T> & { revision: null },
): [T, string, 'rev'] => [type, JSON.stringify(data), 'rev'];

/**
 * `session.created`: its data is the session resource, whose schema src/openapi/responses.ts defines (and this file
 * cannot import: responses.ts imports it), so the caller names it and the data is typed by it.
 */
export const createdEventOf = <S extends z.ZodType>(
  _resource: S,
  data: z.input<S>,
): ['session.created', string] => ['session.created', JSON.stringify(data)];
