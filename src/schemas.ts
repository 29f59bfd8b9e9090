/**
 * Request bodies: the session bodies (create, patch, follow-ups, tool results, decisions), the settings and policies
 * they carry, and the client tools' shapes; the messages inside them are src/message-schemas.ts.
 */
import { z } from 'zod';
import { intQuery } from './int-param.js';
import { jsonSchemaProblem } from './json-schema-check.js';
import { mcpToolEntry, mcpToolsetEntry } from './mcp/schema.js';
import { anthropicToolEntry } from './tools/anthropic-tools.js';
import {
  errorResultHasContent,
  messageParam,
  textBlock,
  toolResultContent,
  userContent,
  userText,
} from './message-schemas.js';

/* Session settings */

const jsonSchemaObject = z
  .looseObject({ type: z.literal('object'), properties: z.record(z.string(), z.unknown()).optional() })
  .superRefine((s, ctx) => {
    const { $schema: _ignored, ...rest } = s;
    const problem = jsonSchemaProblem(rest);
    if (problem) ctx.addIssue({ code: 'custom', message: `not a valid JSON Schema: ${problem}` });
  });
/** Most entries of a session's `tools` (create, PATCH). */
export const MAX_TOOLS = 128;
export const clientTool = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'tool names are 1-128 of [A-Za-z0-9_-]'),
  description: z.string().max(10_000).optional(),
  input_schema: jsonSchemaObject,
  /** Structured outputs for this tool's input: passed through to the Messages API. */
  strict: z.boolean().optional(),
  /**
   * The service checks the model's input against `input_schema` before the session waits: an invalid input is
   * answered at once with an `is_error` result naming the violations (src/engine/client-validation.ts). Never sent
   * to the Messages API.
   */
  validate: z.boolean().optional(),
});
export type ClientTool = z.infer<typeof clientTool>;
/** What the model sends a sub-agent: the task of the child session. */
export const AGENT_INPUT_SCHEMA = {
  type: 'object' as const,
  properties: { prompt: { type: 'string', description: 'The task for the sub-agent, in full.' } },
  required: ['prompt'],
};
/**
 * A sub-agent (spec §7.6): a call creates a child session from `session` (a create body without `messages`,
 * `input`, `start`) with the call's `prompt` as its input; the child's final text is the result. It is a client
 * tool to the engine (`input_schema` is filled in), answered by the service (src/agents/).
 */
export const agentTool = z.strictObject({
  type: z.literal('agent'),
  name: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'tool names are 1-128 of [A-Za-z0-9_-]'),
  description: z.string().min(1).max(10_000),
  session: z.looseObject({}),
  input_schema: jsonSchemaObject.default(AGENT_INPUT_SCHEMA),
});
export type AgentTool = z.infer<typeof agentTool>;
export const isAgentTool = (t: unknown): t is AgentTool =>
  typeof t === 'object' && t !== null && 'type' in t && t.type === 'agent';
export const toolRef = z.union([
  z.string().min(1),
  clientTool,
  mcpToolEntry,
  mcpToolsetEntry,
  anthropicToolEntry,
  agentTool,
]);

/**
 * `params.compaction` would make every turn a compaction request (the SDK runner refuses it too): a session compacts
 * through its route and its policy instead. `null` (what a PATCH sends to remove a field) passes.
 */
function refuseCompactionParam(p: Record<string, unknown>, ctx: z.RefinementCtx): void {
  if (p['compaction'] === undefined || p['compaction'] === null) return;
  ctx.addIssue({
    code: 'custom',
    path: ['compaction'],
    message:
      '`compaction` is not a session param: every turn would compact again. Compact once with POST /v1/sessions/:id/compact, or let the `compaction` policy ({"at_input_tokens": N}) compact before the next turn once a turn passes N input tokens.',
  });
}

/** The Messages API's `metadata` (e.g. `user_id`): flat, at most 64 keys of ≤ 64 chars, values ≤ 512 chars. */
const paramsMetadata = z
  .record(z.string().max(64), z.union([z.string().max(512), z.number(), z.boolean(), z.null()]))
  .refine((m) => Object.keys(m).length <= 64, { message: 'at most 64 metadata keys' });

/**
 * The Messages API's `tool_choice`, in its exact shapes. Whether `any` and `tool` find their tools in the session is
 * checked where the tools are known (src/sessions/create.ts `checkToolChoice`).
 */
const disableParallel = { disable_parallel_tool_use: z.boolean().optional() };
const toolChoice = z.discriminatedUnion('type', [
  z.strictObject({ type: z.literal('auto'), ...disableParallel }),
  z.strictObject({ type: z.literal('any'), ...disableParallel }),
  z.strictObject({
    type: z.literal('tool'),
    name: z
      .string({ error: '`{"type": "tool"}` needs the `name` of one of the session\'s tools' })
      .regex(/^[A-Za-z0-9_-]{1,128}$/, 'tool names are 1-128 of [A-Za-z0-9_-]'),
    ...disableParallel,
  }),
  z.strictObject({ type: z.literal('none') }),
]);

/** Top-level keys `params` may hold once merged (each PATCH may add some; a JSON body's objects have ≤ 256 keys). */
const PARAMS_MAX_KEYS = 64;

/** Messages API params a session sends each turn; `messages`, `tools`, `stream` and `thread` are the service's. */
/** A session's model and `max_tokens` when its create body names none. */
export const DEFAULT_MODEL = 'claude-sonnet-5-5';
export const DEFAULT_MAX_TOKENS = 1024;

export const sessionParams = z
  .looseObject({
    model: z.string().min(1),
    max_tokens: z.number().int().positive().max(1_000_000),
    system: z.union([z.string(), z.array(textBlock)]).optional(),
    temperature: z.number().min(0).max(1).optional(),
    top_p: z.number().min(0).max(1).optional(),
    top_k: z.number().int().positive().optional(),
    stop_sequences: z.array(z.string()).optional(),
    tool_choice: toolChoice.optional(),
    metadata: paramsMetadata.optional(),
    betas: z.array(z.string()).optional(),
  })
  .superRefine((p, ctx) => {
    for (const key of ['messages', 'tools', 'stream', 'thread', 'max_iterations']) {
      if (key in p)
        ctx.addIssue({
          code: 'custom',
          path: [key],
          message: `\`${key}\` is set by the session, not in params`,
        });
    }
    if (Object.keys(p).length > PARAMS_MAX_KEYS)
      ctx.addIssue({ code: 'custom', path: [], message: `at most ${PARAMS_MAX_KEYS} params keys` });
    refuseCompactionParam(p, ctx);
  });
export type SessionParams = z.infer<typeof sessionParams>;
export const paramsPatch = z.looseObject({}).superRefine((p, ctx) => {
  for (const key of ['messages', 'tools', 'stream', 'thread', 'max_iterations']) {
    if (key in p)
      ctx.addIssue({ code: 'custom', path: [key], message: `\`${key}\` cannot be changed through params` });
  }
  refuseCompactionParam(p, ctx);
});

const toolNameList = z.array(z.string().min(1)).max(256);
export const approvalPolicy = z.union([z.enum(['never', 'always', 'default']), toolNameList]);
export const reviewPolicy = z.union([z.boolean(), toolNameList]);
export const onToolError = z.enum(['continue', 'pause', 'fail']);
export const onMaxTokens = z.union([
  z.literal('stop'),
  z.strictObject({ retry: z.literal('double'), ceiling: z.number().int().positive().max(1_000_000) }),
]);
export type OnMaxTokens = z.infer<typeof onMaxTokens>;

/**
 * Policy `budget`: ceilings on the tokens the session's turns may use in total (input + output + cache creation +
 * cache read, the session's `usage`) and on their cost in dollars. `null` is no ceiling. See src/engine/budget.ts.
 */
export const budgetPolicy = z
  .strictObject({
    total_tokens: z.number().int().positive().max(1_000_000_000_000).optional(),
    /** Dollars at list prices (src/cost/prices.ts); refused for a model without a price. */
    // Counted in micro-dollars: less than one would be a budget of nothing.
    cost_usd: z.number().min(0.000001, 'at least 0.000001 (one micro-dollar)').max(1_000_000_000).optional(),
  })
  .refine((b) => b.total_tokens !== undefined || b.cost_usd !== undefined, {
    message: 'give `total_tokens`, `cost_usd` or both (null: no budget)',
  })
  .nullable();
export type BudgetPolicy = z.infer<typeof budgetPolicy>;

/**
 * Policy `compaction`: after a turn whose input (`input_tokens` + cache reads + cache creation) reaches
 * `at_input_tokens`, the conversation is compacted before the next turn (src/engine/compaction.ts). `null`: never.
 */
export const compactionPolicy = z
  .strictObject({
    at_input_tokens: z.number().int().positive().max(100_000_000),
    instructions: z.string().min(1).max(10_000).optional(),
  })
  .nullable();
export type CompactionPolicy = z.infer<typeof compactionPolicy>;

/** `POST /v1/sessions/:id/compact`. */
export const compactBody = z
  .strictObject({ instructions: z.string().min(1).max(10_000).optional() })
  .nullish();

export const policies = {
  max_iterations: z.number().int().min(1).max(1000),
  approval: approvalPolicy,
  review_tool_results: reviewPolicy,
  on_tool_error: onToolError,
  on_max_tokens: onMaxTokens,
  cache_tool_results: z.boolean(),
  stream: z.boolean(),
  run_tools_eagerly: z.boolean(),
  pause_after_turn: z.boolean(),
};

/**
 * Policy `action_timeout_s` (§7.4): how long a `requires_action` session waits for its client; null: for ever. The
 * lower bound (10 s) is checked where the policy is set, against ACTION_TIMEOUT_MIN_S (lower only in tests).
 */
export const actionTimeoutPolicy = z
  .number()
  .int()
  .min(1)
  .max(2_592_000)
  // What the document says: 10 is the bound every deployment has (ACTION_TIMEOUT_MIN_S is lower only in tests).
  .meta({ minimum: 10 })
  .nullable();
export const onActionTimeoutPolicy = z.enum(['deny', 'fail']);
/** Policy `ttl_s` (§7.4): an idle or failed session unchanged this long is deleted; null: kept for ever. */
export const ttlPolicy = z.number().int().min(1).max(3_153_600_000).nullable();

export const metadata = z
  .record(z.string().max(64), z.union([z.string().max(512), z.number(), z.boolean(), z.null()]))
  .refine((m) => Object.keys(m).length <= 32, { message: 'at most 32 metadata keys' });

export const createSessionBody = z
  .strictObject({
    // Checked after the defaults (model, max_tokens) are merged in, so `params` may hold only some fields.
    params: paramsPatch.optional(),
    model: z.string().min(1).optional(),
    max_tokens: z.number().int().positive().optional(),
    system: z.union([z.string(), z.array(textBlock)]).optional(),
    tools: z.array(toolRef).max(MAX_TOOLS).default([]),
    messages: z.array(messageParam).max(10_000).optional(),
    input: userText.optional(),
    max_iterations: policies.max_iterations.default(10),
    approval: approvalPolicy.default('default'),
    review_tool_results: reviewPolicy.default(false),
    on_tool_error: onToolError.default('continue'),
    on_max_tokens: onMaxTokens.default('stop'),
    cache_tool_results: z.boolean().default(false),
    stream: z.boolean().default(true),
    budget: budgetPolicy.default(null),
    run_tools_eagerly: z.boolean().default(false),
    pause_after_turn: z.boolean().default(false),
    compaction: compactionPolicy.default(null),
    action_timeout_s: actionTimeoutPolicy.default(null),
    on_action_timeout: onActionTimeoutPolicy.default('deny'),
    /** Absent: SESSION_TTL_S. */
    ttl_s: ttlPolicy.optional(),
    metadata: metadata.default({}),
    start: z.boolean().default(true),
  })
  .superRefine((b, ctx) => {
    if (b.messages && b.input)
      ctx.addIssue({ code: 'custom', path: ['input'], message: 'give `messages` or `input`, not both' });
  });
export type CreateSessionBody = z.infer<typeof createSessionBody>;

export const patchSessionBody = z
  .strictObject({
    params: paramsPatch.optional(),
    max_iterations: policies.max_iterations.optional(),
    approval: approvalPolicy.optional(),
    review_tool_results: reviewPolicy.optional(),
    on_tool_error: onToolError.optional(),
    on_max_tokens: onMaxTokens.optional(),
    cache_tool_results: z.boolean().optional(),
    stream: z.boolean().optional(),
    budget: budgetPolicy.optional(),
    run_tools_eagerly: z.boolean().optional(),
    pause_after_turn: z.boolean().optional(),
    compaction: compactionPolicy.optional(),
    action_timeout_s: actionTimeoutPolicy.optional(),
    on_action_timeout: onActionTimeoutPolicy.optional(),
    ttl_s: ttlPolicy.optional(),
    // The whole new set, in create's entry forms; applied from the next turn (src/sessions/tools-patch.ts).
    tools: z.array(toolRef).max(MAX_TOOLS).optional(),
    metadata: metadata.optional(),
  })
  .refine((b) => Object.keys(b).length > 0, { message: 'nothing to change' });

export const postMessageBody = z
  .strictObject({
    content: userContent.optional(),
    text: userText.optional(),
    role: z.literal('user').optional(),
    interrupt: z.boolean().default(false),
  })
  .refine((b) => (b.content === undefined) !== (b.text === undefined), {
    message: 'give `content` (string or blocks) or `text`',
  });

/** A result's two fields as a third party answers them (an HTTP tool: its empty error is given a text). */
export const toolResultFields = z.strictObject({
  content: toolResultContent,
  is_error: z.boolean().optional(),
});
/** A client's or a worker's result. */
export const toolResultBody = toolResultFields.refine(...errorResultHasContent);
export const toolResultsBody = z.strictObject({
  results: z
    .array(
      z
        .strictObject({
          tool_use_id: z.string().min(1),
          content: toolResultContent,
          is_error: z.boolean().optional(),
        })
        .refine(...errorResultHasContent),
    )
    .min(1)
    .max(256)
    // One result per call: the same call twice is a malformed request (400), not a call answered already (409).
    .superRefine((results, ctx) => {
      const seen = new Set<string>();
      results.forEach((r, i) => {
        if (seen.has(r.tool_use_id))
          ctx.addIssue({
            code: 'custom',
            path: [i, 'tool_use_id'],
            message: `the call ${r.tool_use_id} is given twice`,
          });
        seen.add(r.tool_use_id);
      });
    }),
  continue: z.boolean().default(false),
});
export const decisionBody = z.strictObject({
  decision: z.enum(['approve', 'deny']),
  input: z.record(z.string(), z.unknown()).optional(),
  reason: z.string().max(10_000).optional(),
});
export const retryBody = z.strictObject({ params: paramsPatch.optional() }).nullish();
/** `PUT /v1/sessions/:id/messages`: the whole new history (the runner's `setMessagesParams`). */
export const replaceMessagesBody = z.strictObject({ messages: z.array(messageParam).min(1).max(10_000) });
export const forkBody = z.strictObject({
  at_iteration: z.number().int().min(0),
  metadata: metadata.optional(),
});
/** Routes that take no body accept none, `null` or `{}`. */
export const emptyBody = z.strictObject({}).nullish();

/**
 * A path's id: any id-like string, so one that names no session is 404 `session_not_found` whatever its shape
 * (`ses_missing` included), as every other resource's is. The set is safe in a Redis key and a hash tag.
 */
export const ID_LIKE = /^[A-Za-z0-9_-]{1,128}$/;
export const sessionIdParam = z.strictObject({
  id: z.string().regex(ID_LIKE, 'not a session id: 1-128 of [A-Za-z0-9_-]'),
});
export const listQuery = z.strictObject({
  limit: intQuery(1, 100, 20),
  cursor: z.string().max(200).optional(),
  status: z.enum(['running', 'requires_action', 'idle', 'failed']).optional(),
});
