import { statusEvent } from '../engine/status.js';
import {
  DomainError,
  InvalidRequest,
  SessionExists,
  StoreUnavailable,
  badRequest,
  zodDetails,
} from '../errors.js';
import { createdEventOf } from '../events/schemas.js';
import { withoutSecrets } from './secrets.js';
import { asBlocks, checkHistory, pendingToolCalls, type StoredMessage } from '../history.js';
import {
  DEFAULT_MAX_TOKENS,
  DEFAULT_MODEL,
  createSessionBody,
  isAgentTool,
  sessionParams,
  type CreateSessionBody,
  type SessionParams,
} from '../schemas.js';
import {
  encodeFields,
  newSessionId,
  type IterationRecord,
  type ParentRef,
  type SessionState,
  type ToolRef,
} from '../store/session-state.js';
import { toolNames } from '../engine/tools-change.js';
import { isMcpEntry, isMcpToolset } from '../mcp/schema.js';
import type { TenantToolDef } from '../tenant-tools/types.js';
import { session } from '../openapi/responses.js';
import { checkCompactionParams } from './compact.js';
import { baseTools } from './removed-tools.js';
import { assertFixedMarks } from '../engine/cache-breakpoints.js';
import { startRun, type SessionDeps } from './mutate.js';
import { assertAgentsPriced } from './agents-priced.js';
import { sessionView } from './view.js';

/** Store user turns with array content: queued follow-ups are appended to them by string concatenation in Lua. */
export function normalize(m: StoredMessage): StoredMessage {
  return m.role === 'user' && typeof m.content === 'string'
    ? { role: 'user', content: asBlocks(m.content) }
    : m;
}

/** What a new session (a created one, a fork) has spent: nothing, its sub-agents' included. */
export const noSpend = (): Pick<SessionState, 'usage' | 'cost' | 'childUsage'> => ({
  usage: emptyUsage(),
  cost: { micros: 0, unpriced: 0, serverToolUse: {} },
  childUsage: emptyChildUsage(),
});

const emptyUsage = () => ({
  input_tokens: 0,
  output_tokens: 0,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: 0,
});
const emptyChildUsage = (): SessionState['childUsage'] => ({ ...emptyUsage(), micros: 0, unpriced: 0 });

/** `action_timeout_s` as given, or 400 below ACTION_TIMEOUT_MIN_S (10 s outside tests). */
export function checkActionTimeout(deps: SessionDeps, t: number | null): number | null {
  const min = deps.store.options.actionTimeoutMinS ?? 10;
  if (t !== null && t < min)
    throw badRequest(`\`action_timeout_s\` is null or ${min}..2592000.`, [
      { path: '/action_timeout_s', code: 'too_small', message: `Too small: expected number to be >=${min}` },
    ]);
  return t;
}

/**
 * A new session from the create body: params, tools and history checked, written, and its run started. `id`: a
 * deterministic id (a schedule's fire): a second create with it fails with 409 `session_exists` and writes nothing.
 */
export async function createSession(
  deps: SessionDeps,
  tenant: string,
  body: CreateSessionBody,
  id?: string,
  parent?: ParentRef,
): Promise<SessionState> {
  const built = await buildSession(deps, tenant, body, id ?? newSessionId(), parent?.depth ?? 1);
  const { state, messages, start } = built;
  if (parent) state.parent = parent;
  // A session of a sub-agent tree is watched before it exists: its runs' ends then wake the agents' sweep.
  if (parent || body.tools.some(isAgentTool)) await deps.store.runs.trees.watch(state.id, tenant);
  await insertSession(deps, state, messages, []);
  if (start) await startRun(deps, state.id);
  return state;
}

/** The checks of a create without its write: what a schedule's `session` body must pass when it is created. */
export async function checkCreate(deps: SessionDeps, tenant: string, body: CreateSessionBody): Promise<void> {
  await buildSession(deps, tenant, body, newSessionId(), 1);
}

/**
 * `params.tool_choice` against the session's tools, as the Messages API checks it: `any` and `tool` need a tool, and
 * `tool` names one of the session's tools (400 `invalid_request`); `auto` and `none` always pass. Create, PATCH (the
 * params and tools after the change, together) and retry check it. A name an `mcp_toolset` may bring (Anthropic's
 * MCP connector: only the API knows its tools) is left to the API.
 */
export async function checkToolChoice(
  deps: SessionDeps,
  scope: {
    tenant: string;
    session: string;
    tools: readonly ToolRef[];
    tenantTools?: Readonly<Record<string, TenantToolDef>>;
  },
  params: SessionParams,
): Promise<void> {
  const choice = params.tool_choice;
  if (!choice || choice.type === 'auto' || choice.type === 'none') return;
  const refuse = (message: string) =>
    badRequest(message, [{ path: '/params/tool_choice', code: 'custom', message }]);
  if (scope.tools.length === 0)
    throw refuse(
      `\`tool_choice\` {"type": "${choice.type}"} needs tools, and the session has none: give \`tools\`, or set \`tool_choice\` to {"type": "auto"} or {"type": "none"} (null: the API's default).`,
    );
  if (choice.type !== 'tool') return;
  const names = new Set<string>();
  for (const t of scope.tools) {
    if (typeof t === 'string') names.add(t);
    else if (isMcpEntry(t)) for (const n of t.allowed_tools ?? []) names.add(n);
    else if ('name' in t && typeof t.name === 'string') names.add(t.name);
  }
  if (names.has(choice.name) || scope.tools.some(isMcpToolset)) return;
  // An MCP server's tools without `allowed_tools`: all those it lists (the toolbox listed them for the tools check).
  if (scope.tools.some((t) => isMcpEntry(t) && !t.allowed_tools)) {
    for (const n of await toolNames(deps.toolbox, scope)) names.add(n);
    if (names.has(choice.name)) return;
  }
  const sorted = [...names].sort();
  const known = sorted.slice(0, 20).join(', ') + (sorted.length > 20 ? ', …' : '');
  throw refuse(
    `\`tool_choice\` names the tool "${choice.name}", which is not a tool of the session (${known ? `its tools: ${known}` : 'it has none by name'}).`,
  );
}

/** Most levels of a tree of sessions: a session, its sub-agents' children, theirs. */
export const MAX_AGENT_DEPTH = 3;

/**
 * Checks the sub-agents of a tools list at `depth` (1: a session created by a client): each one's `session` must
 * be a create body without a history, whose own sub-agents are checked one level down; none deeper than 3.
 */
export async function checkAgents(
  deps: SessionDeps,
  tenant: string,
  tools: CreateSessionBody['tools'],
  depth: number,
) {
  for (const t of tools.filter(isAgentTool)) {
    if (depth >= MAX_AGENT_DEPTH)
      throw badRequest(`Sub-agents nest at most ${MAX_AGENT_DEPTH} levels deep.`, {
        tool: t.name,
        max_depth: MAX_AGENT_DEPTH,
      });
    const given = Object.keys(t.session).filter((k) => ['messages', 'input', 'start'].includes(k));
    if (given.length)
      throw badRequest(`A sub-agent's session takes no ${given.join(', ')}: the call's prompt is its input.`);
    const child = createSessionBody.safeParse({ ...t.session, input: 'check' });
    if (!child.success)
      throw badRequest(
        `Invalid session of sub-agent ${t.name}.`,
        zodDetails(child.error.issues, ['session']),
      );
    await buildSession(deps, tenant, child.data, newSessionId(), depth + 1);
  }
}

async function buildSession(
  deps: SessionDeps,
  tenant: string,
  body: CreateSessionBody,
  id: string,
  depth: number,
) {
  const params = sessionParams.safeParse({
    model: DEFAULT_MODEL,
    max_tokens: DEFAULT_MAX_TOKENS,
    ...body.params,
    ...(body.model ? { model: body.model } : {}),
    ...(body.max_tokens ? { max_tokens: body.max_tokens } : {}),
    ...(body.system !== undefined ? { system: body.system } : {}),
  });
  if (!params.success) throw badRequest('Invalid params.', zodDetails(params.error.issues, ['params']));
  const tenantTools = await deps.toolbox.check(tenant, body.tools);
  const given: StoredMessage[] =
    body.messages ?? (body.input ? [{ role: 'user' as const, content: body.input }] : []);
  // A history with tool changes, given with the tools in effect at its end: its runners send the set from before.
  const toolsBase = await baseTools(deps, tenant, body.tools, given);
  if (toolsBase) Object.assign(tenantTools, toolsBase.copies);
  await checkToolChoice(deps, { tenant, session: id, tools: body.tools, tenantTools }, params.data);
  assertFixedMarks(params.data, body.tools);
  await checkAgents(deps, tenant, body.tools, depth);
  checkCompactionParams(params.data, body.compaction);
  const messages = given.map(normalize);
  checkGivenHistory(messages, body.start);
  // A dollar ceiling (the budget's, the tenant's cap) needs the model's price (400 `unknown_model_price`).
  deps.store.spend.assertPriced(params.data, body.budget?.cost_usd);
  assertAgentsPriced(deps, body.tools, body.budget?.cost_usd);
  // A history that ends with a reply without tool calls is a finished loop (the runner stops at such a reply), as
  // every history GET …/messages answers of an idle session: there is nothing to run, and the session is `idle`.
  // (Sent as it is, its last turn would be an assistant prefill, which the service does not send.)
  const start = body.start && messages.length > 0 && !endsFinished(messages);
  const state = newSessionState(deps, {
    id,
    tenant,
    body,
    params: params.data,
    toolsBase: toolsBase?.tools ?? null,
    tenantTools,
    start,
    msgCount: messages.length,
  });
  return { state, messages, start };
}

/** A created session's history must be one the Messages API takes, and end where a run can start from. */
function checkGivenHistory(messages: StoredMessage[], start: boolean): void {
  const problems = checkHistory(messages);
  if (problems.length) {
    throw new InvalidRequest(
      'invalid_history',
      `The messages break the Messages API's rules: ${problems[0]!.message}.`,
      problems,
    );
  }
  if (start && messages.length === 0) {
    throw badRequest('Give `messages` or `input` to start a session, or `start: false`.');
  }
}

/** Whether a history ends with an assistant turn that calls no tool (nothing for a run to answer). */
const endsFinished = (messages: StoredMessage[]) =>
  messages.at(-1)?.role === 'assistant' && pendingToolCalls(messages).length === 0;

/** The state of a session just created from `body`, holding `msgCount` messages. */
function newSessionState(
  deps: SessionDeps,
  c: {
    id: string;
    tenant: string;
    body: CreateSessionBody;
    params: SessionState['params'];
    toolsBase: SessionState['toolsBase'];
    tenantTools: SessionState['tenantTools'];
    start: boolean;
    msgCount: number;
  },
): SessionState {
  const { id, tenant, body, toolsBase, tenantTools } = c;
  // Redis's clock as reckoned: the write stamps this `updated_at` (insertSession, apply-8.lua `now`), so the answer
  // shows what reads show.
  const now = deps.store.clock.now();
  return {
    id,
    tenant,
    status: c.start ? 'running' : 'idle',
    revision: 0,
    iteration: 0,
    compactions: 0,
    runStart: 0,
    params: c.params,
    tools: body.tools,
    toolsBase,
    toolsSent: toolsBase ? body.tools : null,
    tenantTools,
    maxIterations: body.max_iterations,
    approval: body.approval,
    review: body.review_tool_results,
    onToolError: body.on_tool_error,
    onMaxTokens: body.on_max_tokens,
    cacheToolResults: body.cache_tool_results,
    stream: body.stream,
    budget: body.budget,
    runToolsEagerly: body.run_tools_eagerly,
    pauseAfterTurn: body.pause_after_turn,
    compaction: body.compaction,
    compactRequest: null,
    msgBase: 0,
    pending: null,
    stopReason: null,
    error: null,
    ...noSpend(),
    metadata: body.metadata,
    createdAt: now,
    updatedAt: now,
    fence: 0,
    msgCount: c.msgCount,
    control: '',
    paramsRev: 0,
    thread: null,
    container: null,
    replacedAt: -1,
    actionTimeoutS: checkActionTimeout(deps, body.action_timeout_s),
    onActionTimeout: body.on_action_timeout,
    action: { due: null, warnAt: null, fired: false, timedOut: null, timeoutS: null },
    ttlS: body.ttl_s === undefined ? deps.store.options.sessionTtlS || null : body.ttl_s,
    spendOpen: [],
  };
}

/** The id of the session a keyed create makes (see `createKeyed`). */
export const keyedCreateId = (token: string) => `ses_${token}`;

/**
 * A create with an Idempotency-Key: the session is named after the request's token (src/store/idempotency.ts
 * `appliedToken`: `ses_` and 24 hex digits, never a random id's length; a schedule's fires hash other input), so its
 * existence records the create in the create's own write. A retry whose reservation succeeds because the first
 * request's process died between the write and its answer's record (the key freed when its lease lapsed) finds the
 * session and answers it (`replayed`) instead of creating a second one.
 */
export async function createKeyed(
  deps: SessionDeps,
  tenant: string,
  body: CreateSessionBody,
  token: string,
): Promise<{ state: SessionState; replayed: boolean }> {
  const id = keyedCreateId(token);
  // The id is derived from the tenant too: another tenant's session of this id cannot be, but is never answered.
  const made = async () => {
    const s = await deps.store.load(id);
    return s && s.tenant === tenant ? s : null;
  };
  const before = await made();
  if (before) return { state: before, replayed: true };
  try {
    return { state: await createSession(deps, tenant, body, id), replayed: false };
  } catch (err) {
    // Created meanwhile by a request of the same key (one whose process stalled past its lease).
    const now = err instanceof SessionExists ? await made() : null;
    if (now) return { state: now, replayed: true };
    throw err;
  }
}

/** Indexes a new session, then writes it (fields, history, iteration records, `session.created`) in one script. */
export async function insertSession(
  deps: SessionDeps,
  state: SessionState,
  history: StoredMessage[],
  records: IterationRecord[],
  createdExtra: Record<string, unknown> = {},
): Promise<void> {
  // A session that starts running takes its tenant's run slot before anything is written (429 when none is free).
  if (state.status === 'running') await deps.store.runs.admit(state.tenant, state.id);
  // Indexed first: if the session write then fails, `list` drops the dangling index entry; the other order could
  // leave a session that exists but is never listed.
  await deps.store.index.add(state.tenant, state.id, state.createdAt, state.metadata);
  // Registered before the write (src/store/due.ts), due at the `expires_at` the write makes: `ttl_s` from the
  // `updated_at` it stamps (this create's reckoning of Redis's clock, the sweep's clock), never after it.
  if (state.ttlS) await deps.store.expiryDue.add(state.id, state.updatedAt + state.ttlS * 1000);
  const res = await deps.store
    .apply(
      state.id,
      { create: true },
      {
        // `msg_base` too (encodeFields leaves it to the writes that move messages: apply-8.lua `compact`): a fork's
        // history starts at message `msgBase` of its source's whole record, which its copied iteration records index.
        hset: { ...encodeFields(state), msg_base: String(state.msgBase) },
        // The time this create's answer and `session.created` give as `updated_at` (and `expires_at` from it).
        now: state.updatedAt,
        push_msgs: history.map((m) => JSON.stringify(m)),
        push_iters: records.map((r) => JSON.stringify(r)),
        events: [
          createdEventOf(
            session,
            withoutSecrets({ ...sessionView({ ...state, revision: 1 }), ...createdExtra }),
          ),
          ['session.status', statusEvent(state)],
        ],
      },
      state.tenant,
    )
    .catch(async (err: unknown) => {
      if (err instanceof SessionExists) {
        // A deterministic id created before (a schedule's fire retried, two replicas' sweeps creating one
        // sub-agent): drop this attempt's index entries — unless they are the winner's too. Two creates of one id in
        // the same millisecond index the same member, and removing it would leave the session that exists unlisted.
        if ((await deps.store.load(state.id))?.createdAt !== state.createdAt)
          await deps.store.index.unadd(state.tenant, state.id, state.createdAt, state.metadata);
      } else if (err instanceof DomainError && !(err instanceof StoreUnavailable)) {
        // Refused by the write's script (TENANT_MAX_BYTES, the tenant's daily cost cap): nothing was written. Its
        // index entries would count in TENANT_MAX_SESSIONS until a list passed them, and its run slot in
        // TENANT_MAX_ACTIVE_RUNS until the next admission pruned it: a schedule firing past the cap every minute
        // would fill both. After an outage the write may have landed: `list` and the slots' pruning clean up then.
        await Promise.all([
          deps.store.index.unadd(state.tenant, state.id, state.createdAt, state.metadata),
          state.status === 'running' ? deps.store.runs.end(state.id, state.tenant) : null,
        ]).catch(() => undefined); // Best effort: left, they are cleaned up as after an outage.
      }
      throw err;
    });
  state.revision = res.revision;
}
