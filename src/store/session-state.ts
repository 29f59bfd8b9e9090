/**
 * What a session is, as its meta hash stores it: the SessionState type and the stored types around it (iteration
 * records, compacted segments), and the one encoder and decoder of the hash's fields. Written and read only by the
 * store (store.ts); the other modules see decoded values.
 *
 * One file over 400 lines on purpose: the type, the encoder and the decoder of each field sit together, so a new
 * field is added in one place and cannot be written one way and read another.
 */
import { randomBytes } from 'node:crypto';
import { parseOpenSpend, type OpenSpend, type SpendIncr } from '../cost/spend.js';
import { oneOf } from '../guards.js';
import type { StoredMessage } from '../history.js';
import type { McpToolEntry, McpToolsetEntry } from '../mcp/schema.js';
import type { BudgetPolicy, ClientTool, CompactionPolicy, OnMaxTokens, SessionParams } from '../schemas.js';
import type { AnthropicToolEntry } from '../tools/anthropic-tools.js';
import type { TenantToolDef } from '../tenant-tools/types.js';
import { decodeStored } from './decode.js';
import { decodePending, pendingFields, type PendingStep } from './pending.js';

export const STATUSES = ['running', 'requires_action', 'idle', 'failed'] as const;
export type Status = (typeof STATUSES)[number];
const isStatus = oneOf(STATUSES);
export type ToolRef = string | ClientTool | McpToolEntry | McpToolsetEntry | AnthropicToolEntry;
export type ApprovalPolicy = 'never' | 'always' | 'default' | string[];
export type ReviewPolicy = boolean | string[];

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/** The session's cost totals (meta fields `u_cost`, `u_nc`, `u_st_<counter>`). */
interface SessionCost {
  /** Micro-dollars of the priced turns. */
  micros: number;
  /** Turns of a model without a price: with any, the session's `cost_usd` is null. */
  unpriced: number;
  /** `usage.server_tool_use` of every reply added up (`web_search_requests`, …). */
  serverToolUse: Record<string, number>;
}

/** The usage of a session's sub-agents, added up (meta fields `u_child_*`). */
export interface ChildUsage extends Usage {
  micros: number;
  unpriced: number;
}

/** A type, not an interface: it is a `session.error` event's data as is, which is typed as an open object. */
export type SessionError = {
  code: string;
  message: string;
  retryable: boolean;
};

/** Everything a session is, as stored in its meta hash. */
export interface SessionState {
  id: string;
  tenant: string;
  status: Status;
  revision: number;
  /** Model turns completed (a compaction is not one: `compactions` counts those). */
  iteration: number;
  /**
   * Compactions committed (skipped ones included). The iteration records are one list of `iteration + compactions`
   * entries, turns and compactions in order; record n (1-based, `GET …/iterations/:n`) is its entry n − 1.
   */
  compactions: number;
  /** `iteration` when the current run started; the run's budget is `max_iterations` model turns from there. */
  runStart: number;
  params: SessionParams;
  tools: ToolRef[];
  /**
   * The tools the session's runners send as `tools` (the prompt cache's prefix): the set at create. Null until the
   * first `PATCH` of `tools`; then `tools` is the set from the next turn on (src/engine/tools-change.ts).
   */
  toolsBase: ToolRef[] | null;
  /** The set the model was last told of (`toolsBase` plus the tool changes in the history); null: `tools`. */
  toolsSent: ToolRef[] | null;
  /** Copies of the tenant tools `tools` names, taken at create and PATCH (meta field `tenant_tools`). */
  tenantTools: Record<string, TenantToolDef>;
  maxIterations: number;
  approval: ApprovalPolicy;
  review: ReviewPolicy;
  onToolError: (typeof ON_TOOL_ERROR)[number];
  onMaxTokens: OnMaxTokens;
  cacheToolResults: boolean;
  stream: boolean;
  /** Token ceiling of the session's turns (policy `budget`); null: none. */
  budget: BudgetPolicy;
  /** Start calls that are safe to run twice while the reply streams (see src/engine/eager.ts). */
  runToolsEagerly: boolean;
  /** Policy `pause_after_turn`: each reply waits for review (`review_turn`) before its tools run. */
  pauseAfterTurn: boolean;
  /** Policy `compaction`: compact before the next turn once a turn's input passes `at_input_tokens`; null: never. */
  compaction: CompactionPolicy;
  /** A compaction asked for (route, or policy) and not done yet; see src/engine/compaction.ts. */
  compactRequest: CompactRequest | null;
  /**
   * Messages moved out of the history by compactions (into the kept segments): the history's element i is message
   * `msgBase + i` of the session's whole record (the segments, oldest first, then the history). Iteration records
   * index messages in that whole record.
   */
  msgBase: number;
  pending: PendingStep | null;
  stopReason: string | null;
  error: SessionError | null;
  usage: Usage;
  cost: SessionCost;
  /** What its sub-agents used (theirs and their children's), added as each answered its call (`u_child_*`). */
  childUsage: ChildUsage;
  metadata: Record<string, unknown>;
  createdAt: number;
  updatedAt: number;
  fence: number;
  msgCount: number;
  /** A cancel/interrupt asked of the run in flight, seen by the owner at its next commit or by pub/sub. */
  control: (typeof CONTROLS)[number];
  /** Bumped by PATCH/retry: the runner takes the new params at the next turn boundary. */
  paramsRev: number;
  /** A sub-agent's session (spec §7.6): the call of its parent it answers, and its depth (the parent's + 1). */
  parent?: ParentRef | null;
  /** The message thread the next run continues (src/engine/thread-anchor.ts); null: it creates a new one. */
  thread: ThreadAnchor | null;
  /** The code-execution container of the last reply that named one: sent with every later request. */
  container: string | null;
  /** Iteration records when the history was last replaced (`PUT …/messages`): none of them is retried. -1: never. */
  replacedAt: number;
  /**
   * The chat's user messages posted lately (POST /v1/chat), newest first: written only by `apply`'s `posted` guard
   * (lua/includes/recent.lua), in the same script as the post.
   */
  chatPosted?: PostedEntry[];
  /**
   * The Idempotency-Key tokens of the keyed requests that changed the session lately, newest first: written only by
   * `apply`'s `applied` guard (lua/includes/recent.lua), in the same script as the change.
   */
  applied?: AppliedEntry[];
  /** Policy `action_timeout_s` (null: none) and what a timeout does (src/sessions/deadlines.ts). */
  actionTimeoutS: number | null;
  onActionTimeout: 'deny' | 'fail';
  /** The deadline of the action the session waits for (meta `act_due`, `act_warn`, `act_fired`). */
  action: ActionDeadline;
  /** Policy `ttl_s`: deleted once idle or failed and unchanged this long (src/sessions/retention.ts); null: never. */
  ttlS: number | null;
  /**
   * The spend of the turns this session billed that may not be in its tenant's day yet, oldest first (meta
   * `spend_open`: src/cost/spend.ts OpenSpend); empty: none.
   */
  spendOpen: OpenSpend[];
}

/** How many iteration records the session has (turns and compactions): the number of the last one. */
export const recordCount = (s: Pick<SessionState, 'iteration' | 'compactions'>): number =>
  s.iteration + s.compactions;

export interface ParentRef {
  session_id: string;
  tool_use_id: string;
  depth: number;
}

/** A message thread the API holds: its last reply, and what it holds (checked before a new run continues it). */
export interface ThreadAnchor {
  /** The id of the reply the thread ends with (`previous_message_id`). */
  id: string;
  /** The reply's stop reason (a paused reply is continued with no new message). */
  stop: string;
  /** How many messages of the history the thread holds (through that reply). */
  len: number;
  /** A digest of those messages and the thread's `system` and `tools`. */
  digest: string;
}

/** An action timed out with `deny`: its deadline (ms), and the calls it answered. */
interface TimedOutAction {
  due: number | null;
  ids: string[];
}

/** Meta `act_timed_out`: the last action timed out, and the earlier ones of its step (`ActionDeadline.timedOut`). */
interface TimedOut extends TimedOutAction {
  earlier: TimedOutAction[];
}

/** The deadline of a pending action: any action a `requires_action` session waits for (approval, results, review…). */
interface ActionDeadline {
  /** When it times out (ms); null: no deadline. */
  due: number | null;
  /** When `action.expiring` is due (ms); null once told (or without a deadline). */
  warnAt: number | null;
  /** The last action timed out (a decision still on its way gets 409 `action_timed_out`). */
  fired: boolean;
  /**
   * The last action that timed out (meta `act_timed_out`, kept until another one does): its deadline (ms), and the
   * calls a late answer to it names. Calls answered by the timeout (`deny`: denied, or given their error result) are
   * never asked again, so a decision or result for one of them, however late, is 409 `action_timed_out` (not
   * `nothing_awaits_approval`). None for a `fail` timeout: `resume` asks the same calls again. `earlier`: the
   * timeouts before it of the same step (its approvals timed out, then its client results), each with the calls it
   * answered that the step still holds, so the last timeout does not free a call an earlier one answered.
   */
  timedOut: TimedOut | null;
  /**
   * The `action_timeout_s` its deadline was set with (meta `act_s`): a PATCH of the policy applies from the next
   * action on, so what the timeout tells (`Error: no result within N s`, the events) is this, not the policy now.
   */
  timeoutS: number | null;
}

/**
 * The meta fields of the deadline of the action a session starts waiting for now (`timeoutS` null: none), or of no
 * deadline: every write that makes a session `requires_action` with a new action includes them (and the store
 * registers the deadline in its due set: src/store/deadlines.ts). The one place they are made. `now` is Redis's
 * clock (the store's `clock.now()`), the one the sweep fires deadlines by: from the writing replica's own, one
 * behind by more than the timeout wrote a deadline already past, one ahead a deadline late.
 */
export function deadlineFields(timeoutS: number | null, now: number): Record<string, string> {
  if (!timeoutS) return { act_due: '', act_warn: '', act_fired: '', act_s: '' };
  const ms = timeoutS * 1000;
  return {
    act_due: String(now + ms),
    act_warn: String(now + Math.floor(ms * 0.8)),
    act_fired: '',
    act_s: String(timeoutS),
  };
}

const ON_TOOL_ERROR = ['continue', 'pause', 'fail'] as const;
const isOnToolError = oneOf(ON_TOOL_ERROR);
const CONTROLS = ['', 'cancel', 'interrupt'] as const;
export const isControl = oneOf(CONTROLS);
const isApprovalMode = oneOf(['never', 'always', 'default']);
const isStop = oneOf(['stop']);

/** A compaction asked for and not done yet (meta field `compact`). */
export interface CompactRequest {
  instructions: string | null;
  /**
   * Set when the session was idle or failed: the compaction is a run of its own, after which the session goes back
   * to this status (with its stop reason and error; its pending step stays in its field meanwhile). Absent:
   * scheduled in the run in flight.
   */
  resume?: {
    status: 'idle' | 'failed';
    stop_reason: string | null;
    error: SessionError | null;
    /** Only in a request stored before the step stayed in its own field; then it is the step to go back to. */
    pending?: PendingStep | null;
  };
}

/** A keyed request's change (the record of lua/includes/recent.lua): its token, and whether it queued work. */
export interface AppliedEntry {
  t: string;
  q: boolean;
  /**
   * A chat answer's: the event cursor it streams from, and the assistant message it names (a `regenerate-message`,
   * src/chat/post.ts), so a retry whose answer was lost streams the same answer again (absent: none recorded).
   */
  after?: string;
  message?: string;
}

/** How a chat's user message was posted (the record of lua/includes/recent.lua). */
export interface PostedEntry {
  /** Its UIMessage id. */
  id: string;
  /** The fingerprint of what was posted: the same id with other content is an edit. */
  fp: string;
  /** The event cursor its answer streamed from. */
  after: string;
  /** The revision of the post. */
  rev: number;
  /** The post left the session not running: its answer was the session's status, not a run. */
  idle: boolean;
}

export const newSessionId = () =>
  `ses_${randomBytes(12).toString('base64url').replace(/[-_]/g, '').slice(0, 16)}`;

/** Encodes SessionState fields for HSET. Only the fields given are written. */
export function encodeFields(s: Partial<SessionState>): Record<string, string> {
  const out: Record<string, string> = {};
  const str = (k: string, v: string | number | undefined) => {
    if (v !== undefined) out[k] = String(v);
  };
  const json = (k: string, v: unknown) => {
    if (v !== undefined) out[k] = JSON.stringify(v);
  };
  str('id', s.id);
  str('tenant', s.tenant);
  str('status', s.status);
  str('iteration', s.iteration);
  str('compactions', s.compactions);
  str('run_start', s.runStart);
  json('params', s.params);
  json('tools', s.tools);
  if (s.toolsBase !== undefined) out['tools_base'] = s.toolsBase ? JSON.stringify(s.toolsBase) : '';
  if (s.toolsSent !== undefined) out['tools_sent'] = s.toolsSent ? JSON.stringify(s.toolsSent) : '';
  if (s.tenantTools !== undefined)
    out['tenant_tools'] = Object.keys(s.tenantTools).length ? JSON.stringify(s.tenantTools) : '';
  str('max_iterations', s.maxIterations);
  json('approval', s.approval);
  json('review', s.review);
  str('on_tool_error', s.onToolError);
  json('on_max_tokens', s.onMaxTokens);
  json('cache_tool_results', s.cacheToolResults);
  json('stream', s.stream);
  if ('budget' in s) out['budget'] = s.budget ? JSON.stringify(s.budget) : '';
  json('run_tools_eagerly', s.runToolsEagerly);
  json('pause_after_turn', s.pauseAfterTurn);
  if ('compaction' in s) out['compaction'] = s.compaction ? JSON.stringify(s.compaction) : '';
  if ('compactRequest' in s) out['compact'] = s.compactRequest ? JSON.stringify(s.compactRequest) : '';
  // Nullable fields are stored as '' when null.
  if ('pending' in s) Object.assign(out, pendingFields(s.pending ?? null));
  if ('stopReason' in s) out['stop_reason'] = s.stopReason ?? '';
  if ('error' in s) out['error'] = s.error ? JSON.stringify(s.error) : '';
  json('metadata', s.metadata);
  str('created_at', s.createdAt);
  if ('control' in s) out['control'] = s.control ?? '';
  str('params_rev', s.paramsRev);
  if (s.parent) out['parent'] = JSON.stringify(s.parent);
  if ('thread' in s) out['thread'] = s.thread ? JSON.stringify(s.thread) : '';
  if ('container' in s) out['container'] = s.container ?? '';
  str('replaced_at', s.replacedAt);
  if ('actionTimeoutS' in s) out['action_timeout'] = s.actionTimeoutS ? String(s.actionTimeoutS) : '';
  str('on_action_timeout', s.onActionTimeout);
  if ('ttlS' in s) out['ttl'] = s.ttlS ? String(s.ttlS) : '';
  return out;
}

/**
 * A JSON field, or `fallback` when empty or unreadable (a hand-edited or foreign hash must not break listing).
 * `text` keeps unreadable text that is one of the field's string values (`always` written without quotes).
 */
function json<T>(v: string | undefined, fallback: T, text?: (raw: string) => raw is Extract<T, string>): T {
  if (!v) return fallback;
  try {
    return decodeStored<T>(v);
  } catch {
    return text?.(v) ? v : fallback;
  }
}

/** Meta `act_timed_out` (deadlines.ts), or null when absent or not of its shape (a hand-edited hash). */
function timedOutOf(v: string | undefined): ActionDeadline['timedOut'] {
  const t = json<{ due?: unknown; ids?: unknown; earlier?: unknown } | null>(v, null);
  const one = (a: unknown): TimedOutAction | null => {
    if (typeof a !== 'object' || a === null || !('ids' in a) || !Array.isArray(a.ids)) return null;
    return {
      due: 'due' in a && typeof a.due === 'number' ? a.due : null,
      ids: a.ids.filter((i): i is string => typeof i === 'string'),
    };
  };
  const last = one(t);
  if (!t || !last) return null;
  // Written before `earlier` was: none.
  const earlier = Array.isArray(t.earlier) ? t.earlier.map(one).filter((a) => a !== null) : [];
  return { ...last, earlier };
}

export function decodeFields(h: Record<string, string>): SessionState {
  return {
    id: h['id']!,
    tenant: h['tenant']!,
    // A status that is not one of ours (a foreign or hand-edited hash) reads as `failed`: the session is broken.
    status: isStatus(h['status']) ? h['status'] : 'failed',
    revision: Number(h['revision'] ?? 0),
    iteration: Number(h['iteration'] ?? 0),
    // Absent in sessions stored before compactions had their own count (their `iteration` counted them): the
    // record list is `iteration + compactions` long either way.
    compactions: Number(h['compactions'] ?? 0),
    runStart: Number(h['run_start'] ?? 0),
    // The one cast left here: a hash without params (a foreign or hand-written one; every create writes them) reads
    // as `{}`, as it always has, though SessionParams requires `model` and `max_tokens`.
    params: json(h['params'], {} as SessionParams),
    tools: json(h['tools'], []),
    toolsBase: json(h['tools_base'], null),
    toolsSent: json(h['tools_sent'], null),
    tenantTools: json(h['tenant_tools'], {}),
    maxIterations: Number(h['max_iterations'] ?? 10),
    approval: json<ApprovalPolicy>(h['approval'], 'default', isApprovalMode),
    review: json(h['review'], false),
    onToolError: isOnToolError(h['on_tool_error']) ? h['on_tool_error'] : 'continue',
    onMaxTokens: json<OnMaxTokens>(h['on_max_tokens'], 'stop', isStop),
    cacheToolResults: h['cache_tool_results'] === 'true',
    stream: h['stream'] !== 'false',
    budget: json(h['budget'], null),
    runToolsEagerly: h['run_tools_eagerly'] === 'true',
    pauseAfterTurn: h['pause_after_turn'] === 'true',
    compaction: json(h['compaction'], null),
    compactRequest: json(h['compact'], null),
    msgBase: Number(h['msg_base'] ?? 0),
    pending: decodePending(h),
    stopReason: h['stop_reason'] || null,
    error: json(h['error'], null),
    usage: {
      input_tokens: Number(h['u_in'] ?? 0),
      output_tokens: Number(h['u_out'] ?? 0),
      cache_creation_input_tokens: Number(h['u_cc'] ?? 0),
      cache_read_input_tokens: Number(h['u_cr'] ?? 0),
    },
    cost: decodeCost(h),
    childUsage: {
      input_tokens: Number(h['u_child_in'] ?? 0),
      output_tokens: Number(h['u_child_out'] ?? 0),
      cache_creation_input_tokens: Number(h['u_child_cc'] ?? 0),
      cache_read_input_tokens: Number(h['u_child_cr'] ?? 0),
      micros: Number(h['u_child_cost'] ?? 0),
      unpriced: Number(h['u_child_nc'] ?? 0),
    },
    metadata: json(h['metadata'], {}),
    createdAt: Number(h['created_at'] ?? 0),
    updatedAt: Number(h['updated_at'] ?? 0),
    fence: Number(h['fence'] ?? 0),
    msgCount: Number(h['msg_count'] ?? 0),
    control: isControl(h['control']) ? h['control'] : '',
    paramsRev: Number(h['params_rev'] ?? 0),
    parent: json(h['parent'], null),
    thread: json(h['thread'], null),
    container: h['container'] || null,
    replacedAt: Number(h['replaced_at'] ?? -1),
    chatPosted: json(h['chat_posted'], []),
    applied: json(h['idem_applied'], []),
    actionTimeoutS: Number(h['action_timeout']) || null,
    onActionTimeout: h['on_action_timeout'] === 'fail' ? 'fail' : 'deny',
    action: {
      due: Number(h['act_due']) || null,
      warnAt: Number(h['act_warn']) || null,
      fired: h['act_fired'] === '1',
      timedOut: timedOutOf(h['act_timed_out']),
      timeoutS: Number(h['act_s']) || null,
    },
    ttlS: Number(h['ttl']) || null,
    spendOpen: parseOpenSpend(h['spend_open']),
  };
}

/**
 * The meta fields a session's view (src/sessions/view.ts `sessionView`) reads through `decodeFields`, by name: what a
 * list page reads of each session it shows (lua/list-view-fields-1.lua adds the `u_st_*` counts; `pending` with its
 * `result:*` fields are read after it, outside the script, while the session is `requires_action`, the one status
 * whose view shows the step: session-index.ts `withStep`). Not the rest
 * of the hash: the step of a running session (its calls' inputs, a MB each once edited at approval), the tools as
 * last sent, the tenant tools' definitions, the chat and idempotency records… A field the view comes to read must be
 * named here (sessions-list.test compares each list item with the session's GET).
 */
export const VIEW_FIELDS = [
  'id',
  'tenant',
  'status',
  'revision',
  'iteration',
  'compactions',
  'params',
  'tools',
  'max_iterations',
  'approval',
  'review',
  'on_tool_error',
  'on_max_tokens',
  'cache_tool_results',
  'stream',
  'budget',
  'run_tools_eagerly',
  'pause_after_turn',
  'compaction',
  'compact',
  'stop_reason',
  'error',
  'u_in',
  'u_out',
  'u_cc',
  'u_cr',
  'u_cost',
  'u_nc',
  'u_child_in',
  'u_child_out',
  'u_child_cc',
  'u_child_cr',
  'u_child_cost',
  'u_child_nc',
  'metadata',
  'created_at',
  'updated_at',
  'msg_count',
  'parent',
  'action_timeout',
  'on_action_timeout',
  'ttl',
  'act_due',
] as const;

/** The meta fields a list's filters read (an entry's session, its status), before it reads a session's view. */
export const HEAD_FIELDS = ['id', 'tenant', 'created_at', 'status'] as const;

const SERVER_TOOL_PREFIX = 'u_st_';

function decodeCost(h: Record<string, string>): SessionCost {
  const serverToolUse: Record<string, number> = {};
  // A key walk, not Object.entries: the session hash has ~60 fields and this runs at every load of a session (no
  // array of pairs built for the few `u_st_` ones).
  for (const k in h)
    if (k.startsWith(SERVER_TOOL_PREFIX)) serverToolUse[k.slice(SERVER_TOOL_PREFIX.length)] = Number(h[k]);
  return { micros: Number(h['u_cost'] ?? 0), unpriced: Number(h['u_nc'] ?? 0), serverToolUse };
}

/** A reply's usage as the API reports it (the part the counters read). */
type ReplyCounts = { [K in keyof Usage]?: number | null } & {
  server_tool_use?: object | null;
};

/**
 * HINCRBY ops adding a reply's usage to the session's totals: tokens, server tool requests, and its cost in
 * micro-dollars (`null`: the model has no price, counted in `u_nc`; `undefined`: not a billed turn).
 */
export function usageIncr(
  u: ReplyCounts | null | undefined,
  costMicros?: number | null,
): Record<string, number> {
  const out: Record<string, number> = {
    u_in: u?.input_tokens ?? 0,
    u_out: u?.output_tokens ?? 0,
    u_cc: u?.cache_creation_input_tokens ?? 0,
    u_cr: u?.cache_read_input_tokens ?? 0,
  };
  if (costMicros === null) out['u_nc'] = 1;
  else if (costMicros !== undefined) out['u_cost'] = costMicros;
  for (const [name, n] of Object.entries(u?.server_tool_use ?? {}))
    if (typeof n === 'number' && n > 0 && /^[a-z_]{1,64}$/.test(name)) out[SERVER_TOOL_PREFIX + name] = n;
  return out;
}

/**
 * HINCRBY ops adding a sub-agent's usage (its own and its children's) to its parent's `u_child_*` fields: written
 * with the result that answers the parent's call, so it is counted once. Not the tenant's day counters (the child's
 * turns were counted there already).
 */
export function childUsageIncr(
  c: Pick<SessionState, 'usage' | 'cost' | 'childUsage'>,
): Record<string, number> {
  const k = c.childUsage;
  return {
    u_child_in: c.usage.input_tokens + k.input_tokens,
    u_child_out: c.usage.output_tokens + k.output_tokens,
    u_child_cc: c.usage.cache_creation_input_tokens + k.cache_creation_input_tokens,
    u_child_cr: c.usage.cache_read_input_tokens + k.cache_read_input_tokens,
    u_child_cost: c.cost.micros + k.micros,
    u_child_nc: c.cost.unpriced + k.unpriced,
  };
}

/** The tenant's day counters of a commit's HINCRBY ops (src/cost/spend.ts), or null when it counts no turn. */
export function spendOfIncr(hincr: Record<string, number> | undefined): SpendIncr | null {
  if (!hincr || !('u_in' in hincr)) return null;
  return {
    in: hincr['u_in'] ?? 0,
    out: hincr['u_out'] ?? 0,
    cw: hincr['u_cc'] ?? 0,
    cr: hincr['u_cr'] ?? 0,
    cost: hincr['u_cost'] ?? 0,
    nc: hincr['u_nc'] ?? 0,
  };
}

/** What one compaction summarized (an element of the `compacted` list). */
export interface CompactedSegment {
  /** The record number n of the compaction that summarized it. */
  at_iteration: number;
  messages: StoredMessage[];
}

export interface IterationRecord {
  /**
   * The record's number: record n is `GET …/iterations/:n`, entry n − 1 of the list (turns and compactions in
   * order). Absent in records stored before it; the routes answer it from the position.
   */
  n?: number;
  /** A turn's: its model turn number. A compaction's: the model turns completed before it. */
  iteration: number;
  /** `compaction` for a compaction (its reply is the summary, or none when skipped); absent for a model turn. */
  kind?: 'compaction';
  /** A compaction's: how many messages it summarized (0 when skipped). */
  summarized_messages?: number;
  /**
   * Index of the reply, and of its tool results once they are in, in the session's whole record (see `msgBase`;
   * without compactions, the history). A skipped compaction added no message: -1.
   */
  reply_index: number;
  results_index: number | null;
  request: { model: string; max_tokens: number; message_count: number; params_rev: number };
  stop_reason: string | null;
  /** With the turn's `cost_usd` (null: no price) and `server_tool_use`; absent in records written before them. */
  usage: Usage & { cost_usd?: number | null; server_tool_use?: Record<string, number> };
  tool_calls: Array<{ id: string; name: string }>;
  /**
   * The calls of the turn that were denied (a decision, or an action's timeout), with the decision's reason: set with
   * `results_index` when the results turn is committed (src/engine/tool-step.ts `indexResults`), so the chat's
   * history (src/chat/denials.ts) tells a denial from a tool's error, whose results look alike (`is_error`). Absent
   * when none was, in records written before it, and when the results went in another way (a cancel, a message
   * while the step waited). Not shown by `GET …/iterations`.
   */
  denied?: Array<{ id: string; reason?: string }>;
  started_at: string;
  completed_at: string;
  timings: { upstream_ms: number; first_event_ms: number | null; tools_ms: number | null };
}
