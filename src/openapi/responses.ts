/**
 * The response schemas of the OpenAPI document: the session resource, pages, events (a `oneOf` on `type`), errors,
 * and every other answer a route gives; the answers are checked against them. One file over 400 lines on purpose:
 * it is the document's answer side, read as one, and each route file names its answers from here.
 */
import { z } from 'zod';
import { ERROR_CODES, type ErrorCode } from '../errors.js';
import { ERROR_STATUS, answersWith } from '../plugins/error-status.js';
import { discriminator, eventDataSchemas, nonEmpty } from '../events/schemas.js';
import { EVENT_TYPES } from '../webhooks/schemas.js';

/**
 * Response bodies of the REST routes, as zod schemas. They do two jobs: the OpenAPI document (each `.meta({id})`
 * becomes a component under `#/components/schemas`, so generated clients get named types), and the responses
 * themselves, which are checked against them before they are sent (src/openapi/serializer.ts). So the document cannot
 * say what the service does not send. Only what clients rely on is spelled out; fields added later pass through
 * (the serializer checks, it never strips), and the document says so (no `additionalProperties: false`).
 *
 * One file over 400 lines: every response schema of the document, so their shared parts (usage, errors, the
 * session) are defined once; split by resource when it grows further.
 */

const isoTime = z.string().meta({ format: 'date-time' });

export const errorBody = z
  .object({
    error: z.object({
      code: z.enum(ERROR_CODES).meta({
        description:
          'A stable snake_case code from a closed set (docs/API.md): the same list the service throws from ' +
          '(src/errors.ts `ERROR_CODES`), so a generated client can switch on it.',
      }),
      message: z.string().meta({ description: 'A human sentence; may change.' }),
      details: z.unknown().optional().meta({
        description: 'What went wrong in detail: for `invalid_request` the issues `[{path, code, message}]`.',
      }),
      request_id: z
        .string()
        .optional()
        .meta({
          description:
            "The request's id (its `x-request-id` answer header): every log line of the request carries it. " +
            'Present on every error answer of the HTTP API (not in WebSocket error frames, whose `ref` is yours).',
        }),
    }),
  })
  .meta({ id: 'Error', description: 'Every 4xx and 5xx answer.' });

export const usage = z
  .object({
    input_tokens: z.number(),
    output_tokens: z.number(),
    cache_creation_input_tokens: z.number(),
    cache_read_input_tokens: z.number(),
  })
  .meta({ id: 'Usage' });

export const sessionUsage = usage
  .extend({
    total_tokens: z.number().meta({ description: 'The four counts above added up: what `budget` counts.' }),
    budget_total_tokens: z
      .number()
      .nullable()
      .meta({ description: "The `budget` policy's `total_tokens`; null without a budget." }),
    budget_remaining_tokens: z.number().nullable().meta({
      description: 'What is left of the budget (0 once spent: new messages and `continue` answer 409).',
    }),
    cost_usd: z.number().nullable().meta({
      description:
        'Dollars at list prices (MODEL_PRICES over them) of every turn, compactions included; null once a turn of a model without a price was counted.',
    }),
    server_tool_use: z
      .record(z.string(), z.number())
      .meta({ description: 'Server tool requests of every reply added up (`web_search_requests`, …).' }),
    budget_cost_usd: z
      .number()
      .nullable()
      .meta({ description: "The `budget` policy's `cost_usd`; null without." }),
    budget_remaining_cost_usd: z.number().nullable(),
    children: usage.extend({ total_tokens: z.number(), cost_usd: z.number().nullable() }).meta({
      description:
        "What the session's sub-agents used (theirs and their own children's), added as each answered its call: not in the counts above, but in what is left of `budget`.",
    }),
  })
  .meta({ id: 'SessionUsage' });

const toolCall = z.object({ id: z.string(), name: z.string(), input: z.unknown() });
const toolResult = z.object({ tool_use_id: z.string(), content: z.unknown(), is_error: z.boolean() });

export const requiredAction = z
  .object({
    type: z.enum(['approve_tool_calls', 'review_tool_results', 'submit_tool_results', 'review_turn']),
    tool_calls: z.array(toolCall),
    tool_results: z.array(toolResult),
    message: z
      .object({ role: z.literal('assistant'), content: z.unknown(), stop_reason: z.string().nullable() })
      .optional()
      .meta({ description: '`review_turn`: the reply under review (policy `pause_after_turn`).' }),
    expires_at: isoTime.optional().meta({
      description: 'When the action times out (policy `action_timeout_s`); absent: never.',
    }),
    children_waiting: z
      .array(
        z.object({
          session_id: z.string(),
          tool_use_id: z.string(),
          required_action: z.unknown(),
        }),
      )
      .optional()
      .meta({
        description:
          '`GET /v1/sessions/:id` only: the sub-agent sessions the open agent calls wait for that wait for a client themselves, with their `required_action` (nested the same way).',
      }),
  })
  .meta({ id: 'RequiredAction', description: 'What a client must do before the run goes on.' });

export const sessionError = z
  .object({ code: z.string(), message: z.string(), retryable: z.boolean() })
  .meta({ id: 'SessionError' });

export const sessionStatus = z
  .enum(['running', 'requires_action', 'idle', 'failed'])
  .meta({ id: 'SessionStatus' });

const toolRef = z.union([
  z.string(),
  z.object({
    name: z.string(),
    description: z.string().optional(),
    input_schema: z.looseObject({}),
    strict: z.boolean().optional(),
    validate: z.boolean().optional(),
  }),
  z
    .looseObject({ type: z.string(), name: z.string() })
    .meta({ description: 'An Anthropic-defined tool (web search, code execution, bash, …), as given.' }),
  z.object({ mcp_server: z.string(), allowed_tools: z.array(z.string()).optional() }),
  z
    .looseObject({ type: z.literal('mcp_toolset'), mcp_server_name: z.string() })
    .meta({ description: "Anthropic's MCP connector (a server of `params.mcp_servers`), as given." }),
]);

export const session = z
  .object({
    id: z.string(),
    object: z.literal('session'),
    status: sessionStatus,
    revision: z.number().int().meta({ description: 'Increases by 1 with every persisted change; the ETag.' }),
    iteration: z.number().int().meta({ description: 'Model turns completed (a compaction is not one).' }),
    compactions: z.number().int().meta({
      description:
        'Compactions committed (skipped ones included). The iteration records number `iteration + compactions`.',
    }),
    params: z.looseObject({ model: z.string(), max_tokens: z.number().int() }),
    tools: z.array(toolRef),
    max_iterations: z.number().int(),
    approval: z.union([z.enum(['never', 'always', 'default']), z.array(z.string())]),
    review_tool_results: z.union([z.boolean(), z.array(z.string())]),
    on_tool_error: z.enum(['continue', 'pause', 'fail']),
    on_max_tokens: z.union([
      z.literal('stop'),
      z.object({ retry: z.literal('double'), ceiling: z.number().int() }),
    ]),
    cache_tool_results: z.boolean(),
    stream: z.boolean(),
    budget: z
      .object({ total_tokens: z.number().int().optional(), cost_usd: z.number().optional() })
      .nullable(),
    run_tools_eagerly: z.boolean(),
    pause_after_turn: z.boolean(),
    compaction: z
      .object({ at_input_tokens: z.number().int(), instructions: z.string().optional() })
      .nullable()
      .meta({ description: 'Policy: compact before the next turn once a turn passes `at_input_tokens`.' }),
    compaction_pending: z
      .boolean()
      .meta({ description: 'A compaction was asked for (POST …/compact) and is not done yet.' }),
    action_timeout_s: z.number().int().nullable().optional(),
    on_action_timeout: z.enum(['deny', 'fail']).optional(),
    ttl_s: z.number().int().nullable().optional(),
    expires_at: isoTime.nullable().optional().meta({
      description: 'When the TTL deletes the session if nothing changes it (idle or failed); null: not now.',
    }),
    required_action: requiredAction.nullable(),
    stop_reason: z.string().nullable(),
    error: sessionError.nullable(),
    usage: sessionUsage,
    message_count: z.number().int(),
    metadata: z.record(z.string(), z.unknown()),
    parent: z
      .object({ session_id: z.string(), tool_use_id: z.string() })
      .nullable()
      .meta({ description: "A sub-agent's session: the parent's call it answers." }),
    created_at: isoTime,
    updated_at: isoTime,
  })
  .meta({ id: 'Session' });

/**
 * The session as a mutation answers a client token without `read` (spec §7.2: `read` is what lets a token see the
 * session): who it is and where it stands, nothing of its params, tools, pending calls or usage.
 */
export const sessionReceipt = z
  .object({
    id: z.string(),
    object: z.literal('session'),
    status: sessionStatus,
    revision: z.number().int().meta({ description: 'Increases by 1 with every persisted change; the ETag.' }),
    created_at: isoTime,
    updated_at: isoTime,
  })
  .meta({
    id: 'SessionReceipt',
    description:
      'What a mutation answers a client token without the `read` scope: the session, without its contents.',
  });

/** A mutation's answer: the session, or its receipt for a client token without `read`. */
export const mutatedSession = z.union([session, sessionReceipt]).meta({ id: 'MutatedSession' });

export const sessionList = z
  .object({
    data: z.array(session),
    next_cursor: z.string().nullable(),
    has_more: z.boolean(),
  })
  .meta({ id: 'SessionList' });

export const deletedSession = z
  .object({ id: z.string(), object: z.literal('session'), deleted: z.literal(true) })
  .meta({ id: 'DeletedSession' });

/** A Messages API message param (`{role, content}`), as the next turn sends it. */
const message = z.object({
  role: z.enum(['user', 'assistant', 'system']),
  content: z.union([
    z.string(),
    z.array(
      z
        .record(z.string(), z.unknown())
        .meta({ description: 'A content block of the Messages API (`{type, …}`).' }),
    ),
  ]),
});

export const messageList = z
  .object({
    data: z.array(message),
    pending_tool_calls: z
      .array(z.string())
      .meta({ description: 'ids of `tool_use` blocks of the last reply that have no result yet' }),
    compacted: z
      .array(
        z.object({
          at_iteration: z
            .number()
            .int()
            .meta({ description: 'The record number `n` of the compaction that summarized them.' }),
          messages: z.array(message),
        }),
      )
      .optional()
      .meta({
        description:
          'With `include=compacted`: what each compaction summarized, oldest first (the history as it stood then).',
      }),
  })
  .meta({ id: 'MessageList' });

export const iterationRecord = z
  .object({
    n: z.number().int().meta({
      description:
        'The record number (`GET …/iterations/:n`, `at_iteration` of fork): turns and compactions in order, from 1.',
    }),
    iteration: z.number().int().meta({
      description: "A turn's model turn number; a compaction's: the model turns completed before it.",
    }),
    kind: z
      .literal('compaction')
      .optional()
      .meta({ description: '`compaction` for a compaction; absent for a model turn.' }),
    summarized_messages: z.number().int().optional().meta({
      description: "A compaction's: how many messages it summarized (0 when it produced no summary).",
    }),
    reply_index: z.number().int().meta({
      description:
        "Index of the reply in the session's whole record (compacted segments, then the history); -1 for a compaction that added no message.",
    }),
    results_index: z.number().int().nullable(),
    request: z.looseObject({}),
    stop_reason: z.string().nullable(),
    usage: usage.extend({
      cost_usd: z
        .number()
        .nullable()
        .optional()
        .meta({ description: "The turn's dollars at list prices; null: the model has no price." }),
      server_tool_use: z.record(z.string(), z.number()).optional(),
    }),
    tool_calls: z.array(z.object({ id: z.string(), name: z.string() })),
    started_at: isoTime,
    completed_at: isoTime,
    timings: z.looseObject({}),
  })
  .meta({ id: 'IterationRecord' });

export const iterationList = z.object({ data: z.array(iterationRecord) }).meta({ id: 'IterationList' });

export const iterationDetail = iterationRecord
  .extend({
    reply: message.nullable().meta({ description: 'The reply (`BetaMessage` param) of this iteration.' }),
    tool_results: message
      .nullable()
      .meta({ description: 'The user message with its tool results, once in.' }),
  })
  .meta({ id: 'IterationDetail' });

const envelopeFields = {
  id: z.string().meta({ description: 'The event id (`<ms>-<seq>`): the cursor to resume after this event.' }),
  session_id: z.string(),
  at: isoTime,
  revision: z.number().int().nullable(),
};

const eventId = (t: string) =>
  `${t
    .split(/[._]/)
    .map((p) => p[0]!.toUpperCase() + p.slice(1))
    .join('')}Event`;
const eventData = eventDataSchemas(session);

/**
 * An event (docs/API.md §5): a `oneOf` discriminated by `type`, one member per event type with its `data` schema
 * (src/events/schemas.ts), so a generated client narrows `data` by `type`.
 */
export const eventEnvelope = z
  .discriminatedUnion(
    'type',
    nonEmpty(
      EVENT_TYPES.map((t) =>
        z.object({ ...envelopeFields, type: z.literal(t), data: eventData[t] }).meta({ id: eventId(t) }),
      ),
    ),
  )
  .meta({ id: 'Event', discriminator: discriminator(EVENT_TYPES, eventId) });

export const eventPage = z
  .object({
    data: z.array(eventEnvelope),
    next_cursor: z.string().nullable(),
    has_more: z.boolean(),
  })
  .meta({ id: 'EventPage' });

const tenantToolRunner = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('worker') }),
    z.object({ type: z.literal('http'), url: z.string(), timeout_ms: z.number().int().optional() }),
  ])
  .meta({ id: 'TenantToolRunner' });

const toolWorkers = z
  .object({ active: z.number().int(), last_seen_at: z.string().nullable() })
  .meta({ description: 'Workers that claimed or heartbeated for this tool within two leases.' });

export const tenantTool = z
  .object({
    name: z.string(),
    description: z.string(),
    input_schema: z.looseObject({}),
    runner: tenantToolRunner,
    idempotent: z.boolean(),
    read_only: z.boolean(),
    timeout_ms: z.number().int(),
    max_attempts: z.number().int(),
    created_at: z.string(),
    updated_at: z.string(),
    revision: z
      .number()
      .int()
      .meta({ description: 'Bumped by each PUT; `ETag`, and `If-Match` on PUT and DELETE.' }),
    workers: toolWorkers.optional(),
    secret: z.string().optional().meta({
      description:
        "An http runner's signing secret (`whsec_…`): in the answer of the PUT that set it only (and in that answer's replay: the same `Idempotency-Key` and body).",
    }),
  })
  .meta({ id: 'TenantTool' });

export const deletedTool = z
  .object({ name: z.string(), deleted: z.literal(true) })
  .meta({ id: 'DeletedTool' });

const toolTask = z
  .object({
    id: z.string().meta({ description: 'This offer of the call (`tt_…`): heartbeat and result name it.' }),
    session_id: z.string(),
    tool_use_id: z.string(),
    name: z.string(),
    input: z.unknown(),
    attempt: z.number().int(),
    idempotency_key: z
      .string()
      .meta({ description: '`<session_id>:<tool_use_id>`, the same for every attempt.' }),
    lease_expires_at: z.string(),
    lease_ms: z.number().int().meta({
      description:
        "The lease's length (ms, TOOL_TASK_LEASE_MS) from this answer: heartbeat every third of it. Unlike `lease_expires_at` it needs no clock.",
    }),
  })
  .meta({ id: 'ToolTask' });

export const claimedTasks = z.object({ tasks: z.array(toolTask) }).meta({ id: 'ClaimedToolTasks' });
export const taskLease = z
  .object({
    lease_expires_at: z.string(),
    lease_ms: z.number().int().meta({
      description:
        "The lease's length (ms, TOOL_TASK_LEASE_MS) from this answer: heartbeat every third of it. Unlike `lease_expires_at` it needs no clock.",
    }),
  })
  .meta({ id: 'ToolTaskLease' });
export const taskAccepted = z
  .object({ id: z.string(), accepted: z.literal(true) })
  .meta({ id: 'ToolTaskResultAccepted' });

/** One tool as `GET /v1/tools` lists it, and as `GET /v1/tools/{name}` answers a tool that is not the tenant's. */
export const listedTool = z
  .object({
    name: z.string(),
    description: z.string(),
    input_schema: z.looseObject({}),
    requires_approval: z.boolean(),
    idempotent: z.boolean(),
    source: z.enum(['server', 'mcp', 'memory', 'tenant']).meta({
      description:
        'server: a tool of tools/; mcp: a tool of an MCP server of MCP_SERVERS; memory: the memory tool; tenant: a tool of the tenant (PUT /v1/tools/{name})',
    }),
    runner: tenantToolRunner.optional().meta({ description: "A tenant tool's runner." }),
    workers: toolWorkers.optional(),
    mcp_server: z.string().optional().meta({ description: 'The MCP server, for `source: "mcp"`.' }),
    annotations: z.looseObject({}).optional().meta({
      description: "The MCP server's annotations (readOnlyHint, idempotentHint, destructiveHint, …).",
    }),
  })
  .meta({ id: 'ListedTool' });

/** `GET /v1/tools/{name}`: a tenant tool (with its `ETag`), or another tool as the list shows it (without one). */
export const toolByName = z.union([tenantTool, listedTool]).meta({ id: 'ToolByName' });

export const toolList = z
  .object({
    data: z.array(listedTool),
    mcp_servers: z
      .array(
        z.object({
          name: z.string(),
          reachable: z.boolean(),
          error: z.string().nullable(),
          tool_count: z.number().int(),
        }),
      )
      .meta({ description: 'The MCP servers this tenant may use, and whether they answer.' }),
  })
  .meta({ id: 'ToolList' });

export const health = z.object({ status: z.literal('ok') }).meta({ id: 'Health' });

export const readiness = z
  .object({
    status: z.enum(['ready', 'not_ready']),
    redis: z.enum(['ok', 'unavailable']),
    /** The model backend: the offline fake, or ANTHROPIC_PROVIDER. */
    model: z.enum(['offline', 'anthropic', 'bedrock', 'vertex']),
    active_runs: z.number().int(),
    waiting_runs: z.number().int(),
  })
  .meta({ id: 'Readiness' });

/** GET /v1/chat/:id/messages: the AI SDK's `UIMessage[]` (parts as the `ai` package types them). */
export const uiMessageList = z
  .array(
    z.object({
      id: z.string(),
      role: z.enum(['user', 'assistant']),
      parts: z.array(z.looseObject({ type: z.string() })),
    }),
  )
  .meta({ id: 'UIMessageList', description: "The history as the AI SDK's UIMessage[], oldest first." });

/** Which codes a route answers at a status, where it knows better than the status's default (all its codes). */
export type RouteCodes = Partial<Record<number, readonly ErrorCode[]>>;

/** The codes a status carries: those whose status it is (src/plugins/error-status.ts, what the error handler uses). */
export const codesOfStatus = (status: number): ErrorCode[] =>
  ERROR_CODES.filter((c) => ERROR_STATUS[c] === status);

const pascal = (code: string) =>
  code
    .split('_')
    .map((p) => p[0]!.toUpperCase() + p.slice(1))
    .join('');

/** `SessionNotFound` for a subset of the status's codes; `AndToolNameConflict` for all of them and another. */
function ownName(status: number, codes: readonly ErrorCode[]): string {
  const all = codesOfStatus(status);
  const kept = codes.filter((c) => all.includes(c));
  const extra = codes.filter((c) => !all.includes(c));
  return (
    (kept.length === all.length ? '' : kept.map(pascal).join('')) +
    (extra.length > 0 ? `And${extra.map(pascal).join('')}` : '')
  );
}

/** One component per (status, codes): `Error409` for a status's default, `Error404SessionNotFound` for a route's. */
const narrowed = new Map<string, z.ZodType<ErrorEnvelope>>();
type ErrorEnvelope = z.infer<typeof errorBody>;

/**
 * The error envelope of one status, `error.code` narrowed to the codes given: `allOf` the `Error` component and an
 * `enum`, so a generated client narrows `code` by status. The answers are checked against it like any body
 * (src/openapi/serializer.ts), so in the tests a route answering a code its document does not list fails (a 500).
 */
function errorBodyOf(status: number, codes: readonly ErrorCode[], own: boolean): z.ZodType<ErrorEnvelope> {
  const id = `Error${status}${own ? ownName(status, codes) : ''}`;
  let schema = narrowed.get(id);
  if (!schema) {
    const [first, ...rest] = codes;
    if (first === undefined) throw new Error(`no error code has the status ${status}`);
    const other = codes.find((c) => !answersWith(c, status));
    if (other) throw new Error(`${other} is not answered with ${status}`);
    schema = z
      .intersection(errorBody, z.looseObject({ error: z.looseObject({ code: z.enum([first, ...rest]) }) }))
      .meta({
        id,
        description: `A ${status} answer: \`error.code\` is one of ${codes.map((c) => `\`${c}\``).join(', ')}.`,
      });
    narrowed.set(id, schema);
  }
  return schema;
}

/**
 * The error envelope for each status given: `response: {200: session, ...errors(400, 404)}`. Each status's
 * `error.code` is the enum of the codes of that status; `routeErrors` narrows it further for a route.
 */
export function errors<S extends number>(...statuses: S[]): Record<S, z.ZodType<ErrorEnvelope>> {
  return routeErrors({}, ...statuses);
}

/** `errors(...)` with the codes the route answers at some of its statuses: `routeErrors({404: ['session_not_found']}, 400, 404)`. */
export function routeErrors<S extends number>(
  codes: RouteCodes,
  ...statuses: S[]
): Record<S, z.ZodType<ErrorEnvelope>> {
  // Kept cast: Object.fromEntries types its keys as any string; they are exactly `statuses`, which the routes'
  // reply types are inferred from.
  return Object.fromEntries(
    statuses.map((s) => {
      const own = codes[s];
      return [s, errorBodyOf(s, own ?? codesOfStatus(s), own !== undefined)];
    }),
  ) as Record<S, z.ZodType<ErrorEnvelope>>;
}

/**
 * The 413 of a route whose refusal is not only its body's size (the status's default answer says BODY_LIMIT): one
 * that adds to a user turn MAX_TURN_BYTES bounds (a step's tool results together, the follow-ups of the next turn)
 * says `why` too. The same `Error413` envelope.
 */
export function payloadTooLarge(why: string) {
  return {
    description: `The body is larger than BODY_LIMIT, or ${why} (\`payload_too_large\`; \`details.quota\`: \`MAX_TURN_BYTES\`).`,
    content: { 'application/json': { schema: errorBodyOf(413, codesOfStatus(413), false) } },
  };
}

/**
 * The 413 of a route whose body limit is not BODY_LIMIT (its `bodyLimit`, named in its `bodyLimitName` for the
 * refusal's message, src/plugins/errors.ts): `limit` says it as the route computes it. The same `Error413` envelope.
 */
export function bodyTooLarge(limit: string) {
  return {
    description: `The body is larger than the route's limit, ${limit} (\`payload_too_large\`).`,
    content: { 'application/json': { schema: errorBodyOf(413, codesOfStatus(413), false) } },
  };
}

/** The 413 of a route that takes a tool result of the pending step (or writes one: a denial). */
export const stepResultsTooLarge = () =>
  payloadTooLarge(
    "the pending step's tool results would be larger than MAX_TURN_BYTES together with this one",
  );

/* Usage (spec §7.4) */

const dayUsage = z
  .object({
    date: z.string().meta({ description: 'The UTC day, YYYY-MM-DD.' }),
    input_tokens: z.number().int(),
    output_tokens: z.number().int(),
    cache_creation_input_tokens: z.number().int(),
    cache_read_input_tokens: z.number().int(),
    cost_usd: z.number().meta({ description: 'Dollars at list prices of the priced turns.' }),
    unpriced_turns: z
      .number()
      .int()
      .meta({ description: 'Turns of models without a price: tokens counted, no cost.' }),
  })
  .meta({ id: 'DayUsage' });

export const usageDays = z
  .object({
    object: z.literal('usage'),
    from: z.string(),
    to: z.string(),
    cost_usd: z.number().meta({ description: 'The days added up.' }),
    data: z.array(dayUsage),
  })
  .meta({ id: 'UsageDays' });

/* Webhooks (spec §6.3) */

export const webhook = z
  .object({
    id: z.string(),
    object: z.literal('webhook'),
    url: z.string(),
    events: z.array(z.string()),
    description: z.string().nullable(),
    disabled: z.boolean().meta({ description: 'true after 24 h of failed deliveries, or when PATCHed so.' }),
    failing_since: isoTime.nullable(),
    revision: z.number().int().meta({ description: 'The ETag; give it back in If-Match.' }),
    created_at: isoTime,
    updated_at: isoTime,
  })
  .meta({ id: 'Webhook' });

export const createdWebhook = webhook
  .extend({
    secret: z.string().meta({ description: 'The signing secret (`whsec_…`): shown only in this answer.' }),
  })
  .meta({ id: 'CreatedWebhook' });

export const webhookList = z
  .object({ data: z.array(webhook), has_more: z.boolean() })
  .meta({ id: 'WebhookList' });

export const deletedWebhook = z
  .object({ id: z.string(), object: z.literal('webhook'), deleted: z.literal(true) })
  .meta({ id: 'DeletedWebhook' });

export const deliveryList = z
  .object({
    data: z.array(
      z.object({
        message_id: z
          .string()
          .meta({ description: 'The `webhook-id` header of every attempt of this event.' }),
        event_id: z.string().nullable(),
        event_type: z.string(),
        session_id: z.string().nullable(),
        attempt: z.number().int(),
        status_code: z.number().int().nullable(),
        error: z.string().nullable(),
        duration_ms: z.number(),
        at: isoTime,
      }),
    ),
  })
  .meta({ id: 'DeliveryList', description: 'Recent delivery attempts, newest first.' });

export const testDelivery = z
  .object({ message_id: z.string(), type: z.string() })
  .meta({ id: 'TestDelivery', description: 'A `webhook.test` event was queued for delivery.' });

/* The memory tool's files (spec §6.2) */

export const memoryFileList = z
  .object({
    data: z.array(
      z.object({
        path: z.string().meta({ description: 'Relative to /memories, as in `/v1/memory/<path>`.' }),
        size_bytes: z.number().int(),
      }),
    ),
    total_bytes: z.number().int(),
    limits: z.object({
      max_file_bytes: z.number().int(),
      max_tenant_bytes: z.number().int(),
      max_files: z.number().int(),
    }),
  })
  .meta({ id: 'MemoryFileList' });

export const memoryFile = z
  .object({ path: z.string(), content: z.string(), size_bytes: z.number().int() })
  .meta({ id: 'MemoryFile' });

export const deletedMemoryFile = z
  .object({ path: z.string(), deleted: z.literal(true) })
  .meta({ id: 'DeletedMemoryFile' });
