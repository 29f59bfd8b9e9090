/**
 * SessionStore: every read and write of a session's keys (meta hash, history, records, queue, events, lease, the
 * compacted segments), each method one round trip whose atomicity its JSDoc states. Over 400 lines because the
 * session's keys have one door on purpose: splitting it by operation would let two files build the same keys and
 * guards; the event log (store/events.ts), channels (store/channels.ts) and memory files (store/memory.ts) are apart
 * because they touch other keys.
 */
import type { Cluster, Redis } from 'ioredis';
import { randomBytes } from 'node:crypto';
import { oneOf } from '../guards.js';
import { FencedOut, AppError, notFound, revisionMismatch, conflict, quotaExceeded } from '../errors.js';
import type { StoredBlock, StoredMessage } from '../history.js';
import type { McpToolEntry } from '../mcp/schema.js';
import type { BudgetPolicy, ClientTool, CompactionPolicy, OnMaxTokens, SessionParams } from '../schemas.js';
import type { AnthropicToolEntry } from '../tools/anthropic-tools.js';
import {
  RUNS_KEY,
  controlChannel,
  eventsChannel,
  sessionKeys,
  tenantIndexKey,
  tenantRunsKey,
  type SessionKeys,
} from './keys.js';
import { decodeStored } from './decode.js';
import { defineLuaCommands } from './lua-commands.js';
import { decodePending, pendingFields, type PendingStep, type ResultsEntry } from './pending.js';
import type { SessionKeyList } from './lua/commands.js';

export type RedisClient = Redis | Cluster;
export const STATUSES = ['running', 'requires_action', 'idle', 'failed'] as const;
export type Status = (typeof STATUSES)[number];
const isStatus = oneOf(STATUSES);
export type ToolRef = string | ClientTool | McpToolEntry | AnthropicToolEntry;
export type ApprovalPolicy = 'never' | 'always' | 'default' | string[];
export type ReviewPolicy = boolean | string[];

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

export interface SessionError {
  code: string;
  message: string;
  retryable: boolean;
}

/** Everything a session is, as stored in its meta hash. */
export interface SessionState {
  id: string;
  tenant: string;
  status: Status;
  revision: number;
  iteration: number;
  /** `iteration` when the current run started; the run's budget is `max_iterations` from there. */
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
  metadata: Record<string, unknown>;
  createdAt: number;
  updatedAt: number;
  fence: number;
  msgCount: number;
  /** A cancel/interrupt asked of the run in flight, seen by the owner at its next commit or by pub/sub. */
  control: (typeof CONTROLS)[number];
  /** Bumped by PATCH/retry: the runner takes the new params at the next turn boundary. */
  paramsRev: number;
}

const ON_TOOL_ERROR = ['continue', 'pause', 'fail'] as const;
const isOnToolError = oneOf(ON_TOOL_ERROR);
const CONTROLS = ['', 'cancel', 'interrupt'] as const;
const isControl = oneOf(CONTROLS);
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

/**
 * A turn's content as it travels from where it comes from to the model: the JSON text of a content-block array,
 * made only by `encodeBlocks` (once, where the blocks come from: a follow-up at its route, tool results in the
 * engine), written once into the history by `apply`, joined there as text and never re-encoded on the way.
 */
export type EncodedBlocks = string & { readonly __encoded: 'blocks' };

export const encodeBlocks = (blocks: readonly StoredBlock[]): EncodedBlocks =>
  JSON.stringify(blocks) as EncodedBlocks;

/** Ops of one `apply` (see lua/apply-7.lua); values already encoded. */
export interface ApplyOps {
  /** Applied first: the first `count` messages become a kept segment, `summary` (message JSON) their stand-in. */
  compact?: { count: number; at_iteration: number; summary: string };
  trim_msgs?: number;
  lset_msgs?: Array<[number, string]>;
  push_msgs?: string[];
  trim_iters?: number;
  lset_iters?: Array<[number, string]>;
  push_iters?: string[];
  hset?: Record<string, string>;
  hincr?: Record<string, number>;
  /** Follow-ups queued for the next user turn (the store adds the MAX_TURN_BYTES guard). */
  queue_push?: EncodedBlocks[];
  release_lease?: boolean;
  /** `[type, data]`, or `[type, data, 'rev']` to have `"revision":null` in data replaced by the new revision. */
  events?: Array<[string, string] | [string, string, 'rev']>;
  /**
   * Pops the queued follow-ups into one user turn after `base`, or after the tool results `results` (in their order:
   * a stored result named, see store/pending.ts; `cache_last` marks the last one as a prompt-cache breakpoint).
   */
  queue?: {
    base?: EncodedBlocks;
    results?: ResultsEntry[];
    cache_last?: boolean;
    into_last?: boolean;
    none?: ApplyOps;
  };
}

export interface Guard {
  fence?: number;
  rev?: number;
  status?: Status[];
  create?: boolean;
  /** Bytes the user turn that queued follow-ups form may reach (set by the store from its options). */
  turn_max?: number;
}

export interface ApplyResult {
  revision: number;
  mergedCount: number;
  /** The blocks the change added to the history as a user turn (tool results, follow-ups), or null. */
  appended: StoredBlock[] | null;
  /** `appended` joined the last user turn rather than making a new one. */
  intoLast: boolean;
  control: SessionState['control'];
  paramsRev: number;
}

export interface StoredEvent {
  id: string;
  type: string;
  /** Event data as stored (JSON text). */
  data: string;
  revision: number;
  at: number;
}

/** A session put in `running` by a route is claimable by any replica after this long if no process took it. */
const START_DUE_DELAY_MS = 2000;

function setsRunning(ops: ApplyOps | undefined): boolean {
  return !!ops && (ops.hset?.['status'] === 'running' || setsRunning(ops.queue?.none));
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
  str('run_start', s.runStart);
  json('params', s.params);
  json('tools', s.tools);
  if (s.toolsBase !== undefined) out['tools_base'] = s.toolsBase ? JSON.stringify(s.toolsBase) : '';
  if (s.toolsSent !== undefined) out['tools_sent'] = s.toolsSent ? JSON.stringify(s.toolsSent) : '';
  str('max_iterations', s.maxIterations);
  json('approval', s.approval);
  json('review', s.review);
  str('on_tool_error', s.onToolError);
  json('on_max_tokens', s.onMaxTokens);
  json('cache_tool_results', s.cacheToolResults);
  json('stream', s.stream);
  if ('budget' in s) out['budget'] = s.budget ? JSON.stringify(s.budget) : '';
  json('run_tools_eagerly', s.runToolsEagerly);
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

function decodeFields(h: Record<string, string>): SessionState {
  return {
    id: h['id']!,
    tenant: h['tenant']!,
    // A status that is not one of ours (a foreign or hand-edited hash) reads as `failed`: the session is broken.
    status: isStatus(h['status']) ? h['status'] : 'failed',
    revision: Number(h['revision'] ?? 0),
    iteration: Number(h['iteration'] ?? 0),
    runStart: Number(h['run_start'] ?? 0),
    // The one cast left here: a hash without params (a foreign or hand-written one; every create writes them) reads
    // as `{}`, as it always has, though SessionParams requires `model` and `max_tokens`.
    params: json(h['params'], {} as SessionParams),
    tools: json(h['tools'], []),
    toolsBase: json(h['tools_base'], null),
    toolsSent: json(h['tools_sent'], null),
    maxIterations: Number(h['max_iterations'] ?? 10),
    approval: json<ApprovalPolicy>(h['approval'], 'default', isApprovalMode),
    review: json(h['review'], false),
    onToolError: isOnToolError(h['on_tool_error']) ? h['on_tool_error'] : 'continue',
    onMaxTokens: json<OnMaxTokens>(h['on_max_tokens'], 'stop', isStop),
    cacheToolResults: h['cache_tool_results'] === 'true',
    stream: h['stream'] !== 'false',
    budget: json(h['budget'], null),
    runToolsEagerly: h['run_tools_eagerly'] === 'true',
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
    metadata: json(h['metadata'], {}),
    createdAt: Number(h['created_at'] ?? 0),
    updatedAt: Number(h['updated_at'] ?? 0),
    fence: Number(h['fence'] ?? 0),
    msgCount: Number(h['msg_count'] ?? 0),
    control: isControl(h['control']) ? h['control'] : '',
    paramsRev: Number(h['params_rev'] ?? 0),
  };
}

/** HINCRBY ops adding a reply's usage to the session's totals. */
export function usageIncr(
  u: { [K in keyof Usage]?: number | null } | null | undefined,
): Record<string, number> {
  return {
    u_in: u?.input_tokens ?? 0,
    u_out: u?.output_tokens ?? 0,
    u_cc: u?.cache_creation_input_tokens ?? 0,
    u_cr: u?.cache_read_input_tokens ?? 0,
  };
}

/**
 * Largest notice (bytes of event data, roughly) that carries its events over pub/sub: every process watching the
 * session receives it, so big events (a 100 kB `turn.completed`) are read from the log instead.
 */
export const NOTICE_MAX_BYTES = 16 * 1024;

/**
 * Told of every write that appends events, before it is sent (webhooks, src/webhooks/tap.ts). It returns undefined
 * when nothing listens for these types; else `ready`, a write the event write must not overtake (awaited only when
 * given), and `landed`, called once the event write succeeded. `tenant` is given where the store knows it.
 */
export type EventTap = (
  sessionId: string,
  types: readonly string[],
  tenant?: string,
) => { ready?: Promise<void> | undefined; landed(): void } | undefined;

/** The event types an `apply` may write (a superset: a queue merge may or may not happen). */
function opsEventTypes(ops: ApplyOps | undefined, out: string[] = []): string[] {
  if (!ops) return out;
  for (const ev of ops.events ?? []) out.push(ev[0]);
  if (ops.queue) {
    out.push('message.appended');
    opsEventTypes(ops.queue.none, out);
  }
  return out;
}

export interface StoreOptions {
  /** Most events a session's log keeps (EVENT_LOG_MAX). */
  eventLogMax: number;
  /** Most bytes a session's log keeps (EVENT_LOG_MAX_BYTES; see lua/includes/event-log.lua). */
  eventLogMaxBytes?: number;
  /** Most bytes of the user turn queued follow-ups form (MAX_TURN_BYTES); over it a follow-up is refused (413). */
  maxTurnBytes?: number;
  /** Most sessions of one tenant running at once, across replicas (TENANT_MAX_ACTIVE_RUNS); 0 or absent: no limit. */
  tenantMaxActiveRuns?: number;
}

/**
 * A run slot younger than this is never dropped as stale: the write that makes its session `running` may still be
 * on its way (the slot is taken first).
 */
const RUN_SLOT_GRACE_MS = 10_000;

/** Defaults of the optional StoreOptions (the config's). */
export const EVENT_LOG_MAX_BYTES = 16 * 1024 * 1024;
export const MAX_TURN_BYTES = 4 * 1024 * 1024;

/**
 * The session store: every read and write of session state goes through here. Writes are single Lua scripts over
 * the keys of one session; the guarantees of each are in its JSDoc.
 */
export class SessionStore {
  readonly redis: RedisClient;
  /** Set by the webhooks plugin; see EventTap. */
  eventTap: EventTap | undefined;

  constructor(
    redis: RedisClient,
    readonly options: StoreOptions,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sess');
    this.redis = redis;
  }

  private keyList(k: SessionKeys): SessionKeyList {
    return [k.meta, k.msgs, k.iters, k.queue, k.events, k.lease, k.compacted];
  }

  /**
   * Applies `ops` atomically if `guard` holds (fence, revision, status, existence); otherwise writes nothing and
   * throws: FencedOut, 412 revision_mismatch, 409 invalid_status (with the current status), 404 session_not_found.
   * Bumps the revision by one, stamps `updated_at`, writes the events with the new revision, and publishes the
   * last event id on the session's events channel — all in one round trip. `tenant`, when the caller knows it (a
   * create, a request of the tenant), tells the event tap whose session it is from its first write.
   * A change that starts a run (sets `running`) first takes a slot among the tenant's active runs (429
   * `quota_exceeded` when TENANT_MAX_ACTIVE_RUNS are running) and registers the run as due (the tenant read from
   * the session when not given).
   */
  async apply(id: string, guard: Guard, ops: ApplyOps, tenant?: string): Promise<ApplyResult> {
    const k = sessionKeys(id);
    // A change that makes the session `running` registers it in the run queue first: should the store fail between
    // the two writes, a due entry without a running session is dropped by the sweep, whereas a running session
    // without a due entry would never run. (`runs:due` is a global key, so it cannot join the session's script.)
    // Its run slot is taken before both, for the same reason: a slot without a running session is dropped later.
    if (setsRunning(ops)) {
      await this.takeRunSlot(tenant ?? (await this.redis.hget(k.meta, 'tenant')), id);
      await this.markDue(id, Date.now() + START_DUE_DELAY_MS);
    }
    const tap = this.eventTap?.(id, opsEventTypes(ops), tenant);
    if (tap?.ready) await tap.ready;
    const turnMax = this.options.maxTurnBytes ?? MAX_TURN_BYTES;
    const res = await this.redis.sessApply(
      ...this.keyList(k),
      JSON.stringify(ops.queue_push ? { ...guard, turn_max: turnMax } : guard),
      JSON.stringify(ops),
      this.options.eventLogMax,
      eventsChannel(id),
      NOTICE_MAX_BYTES,
      this.options.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
    );
    if (res[0] === 'ERR') {
      const code = String(res[1]);
      const current = String(res[2]);
      if (code === 'fenced') throw new FencedOut(id);
      if (code === 'revision') throw revisionMismatch(Number(current));
      if (code === 'status')
        throw conflict('invalid_status', `Not possible while the session is ${current}.`, {
          status: current,
        });
      if (code === 'exists') throw conflict('session_exists', 'A session with this id exists.');
      if (code === 'turn_too_large') {
        throw new AppError(
          413,
          'payload_too_large',
          `The user turn this message joins would be ${current} bytes, more than MAX_TURN_BYTES (${turnMax}).`,
          { limit: turnMax, turn_bytes: Number(current), quota: 'MAX_TURN_BYTES' },
        );
      }
      throw notFound();
    }
    tap?.landed();
    return {
      revision: Number(res[0]),
      mergedCount: Number(res[1]),
      // Parsed once, here: the engine extends the history it holds with exactly what was written.
      appended: res[2] ? decodeStored<StoredBlock[]>(res[2]) : null,
      intoLast: Number(res[3]) === 1,
      control: isControl(res[4]) ? res[4] : '',
      paramsRev: Number(res[5] ?? 0),
    };
  }

  /** Whether the client is a Redis Cluster client (which may send a pipeline later than it was made). */
  get isCluster(): boolean {
    return this.redis.isCluster;
  }

  /** The marker of the last commit that landed (see the engine's commit): one HGET. */
  lastCommit(id: string): Promise<string | null> {
    return this.redis.hget(sessionKeys(id).meta, 'last_commit');
  }

  /** The session, or null. One HGETALL. */
  async load(id: string): Promise<SessionState | null> {
    const h = await this.redis.hgetall(sessionKeys(id).meta);
    return h['id'] ? decodeFields(h) : null;
  }

  /** The session if it exists and belongs to `tenant`; 404 otherwise (another tenant's session is not found). */
  async loadFor(tenant: string, id: string): Promise<SessionState> {
    const s = await this.load(id);
    if (!s || s.tenant !== tenant) throw notFound();
    return s;
  }

  async history(id: string, start = 0, end = -1): Promise<StoredMessage[]> {
    const raw = await this.redis.lrange(sessionKeys(id).msgs, start, end);
    return raw.map((m) => decodeStored<StoredMessage>(m));
  }

  /** What compactions summarized: the kept segments, oldest first. One LRANGE. */
  async compacted(id: string): Promise<CompactedSegment[]> {
    const raw = await this.redis.lrange(sessionKeys(id).compacted, 0, -1);
    return raw.map((r) => decodeStored<CompactedSegment>(r));
  }

  /**
   * Messages `from` to `to` (inclusive) of the session's whole record (the kept segments, then the history), as
   * iteration records index them; `base` is the session's `msgBase`. The history is read alone when it holds them.
   */
  async messagesAt(id: string, base: number, from: number, to: number): Promise<StoredMessage[]> {
    if (from >= base) return this.history(id, from - base, to - base);
    const segments = await this.compacted(id);
    const all = [...segments.flatMap((s) => s.messages), ...(to >= base ? await this.history(id) : [])];
    return all.slice(from, to + 1);
  }

  /**
   * The history as it was when the session's whole record had `end` messages (a fork's point): the messages from
   * the summary that stood first then (or from the start) up to `end`, and the whole-record index of the first.
   */
  async historyUntil(
    id: string,
    base: number,
    end: number,
  ): Promise<{ messages: StoredMessage[]; base: number }> {
    if (end > base) return { messages: await this.history(id, 0, end - base - 1), base };
    let start = 0;
    for (const segment of await this.compacted(id)) {
      const next = start + segment.messages.length;
      if (end <= next) return { messages: segment.messages.slice(0, end - start), base: start };
      start = next;
    }
    return { messages: [], base: 0 };
  }

  async lastMessage(id: string): Promise<StoredMessage | null> {
    const raw = await this.redis.lindex(sessionKeys(id).msgs, -1);
    return raw ? decodeStored<StoredMessage>(raw) : null;
  }

  async iterationRecords(id: string, start = 0, end = -1): Promise<IterationRecord[]> {
    const raw = await this.redis.lrange(sessionKeys(id).iters, start, end);
    return raw.map((r) => decodeStored<IterationRecord>(r));
  }

  async queueLength(id: string): Promise<number> {
    return this.redis.llen(sessionKeys(id).queue);
  }

  /** Events after `after` (exclusive; `0-0` or '' for all), at most `count`. */
  async events(id: string, after: string, count: number): Promise<StoredEvent[]> {
    const start = after && after !== '0' && after !== '0-0' ? `(${after}` : '-';
    const rows = await this.redis.xrange(sessionKeys(id).events, start, '+', 'COUNT', count);
    return rows.map(parseEntry);
  }

  /** The oldest event id still in the log, or null when the log is empty. */
  async firstEventId(id: string): Promise<string | null> {
    const rows = await this.redis.xrange(sessionKeys(id).events, '-', '+', 'COUNT', 1);
    return rows[0]?.[0] ?? null;
  }

  async lastEventId(id: string): Promise<string | null> {
    const rows = await this.redis.xrevrange(sessionKeys(id).events, '+', '-', 'COUNT', 1);
    return rows[0]?.[0] ?? null;
  }

  /**
   * Appends events that change no session field (stream deltas, turn.started) and publishes their notice, atomically
   * in one script (one round trip), without bumping the revision. Not fenced: a stale writer can add noise to the
   * log, never to the history.
   */
  async appendEvents(id: string, events: Array<[string, string]>): Promise<void> {
    if (events.length === 0) return;
    const k = sessionKeys(id);
    const args: Array<string | number> = [
      k.meta,
      k.events,
      eventsChannel(id),
      this.options.eventLogMax,
      Date.now(),
      NOTICE_MAX_BYTES,
      this.options.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
    ];
    for (const [type, data] of events) args.push(type, data);
    const tap = this.eventTap?.(
      id,
      events.map(([type]) => type),
    );
    if (tap?.ready) await tap.ready;
    await this.redis.sessAppendEvents(...args);
    tap?.landed();
  }

  /** Takes the run lease of a `running` session; the fencing token, or 0 if another holds it. */
  acquire(id: string, owner: string, ttlMs: number): Promise<number> {
    const k = sessionKeys(id);
    return this.redis.sessAcquire(k.meta, k.lease, owner, ttlMs).then(Number);
  }

  renew(id: string, owner: string, fence: number, ttlMs: number): Promise<boolean> {
    return this.redis.sessRenew(sessionKeys(id).lease, `${owner}:${fence}`, ttlMs).then((r) => r === 1);
  }

  release(id: string, owner: string, fence: number): Promise<boolean> {
    return this.redis.sessRelease(sessionKeys(id).lease, `${owner}:${fence}`).then((r) => r === 1);
  }

  async leaseHolder(id: string): Promise<string | null> {
    return this.redis.get(sessionKeys(id).lease);
  }

  /** Marks a running session as claimable by any replica after `atMs` (crash recovery). */
  async markDue(id: string, atMs: number): Promise<void> {
    await this.redis.zadd(RUNS_KEY, atMs, id);
  }

  /**
   * The run is over (the session left `running`, or is gone): drops its due entry and gives back its tenant's
   * run slot. `tenant` is read from the session when not given (one HGET).
   */
  async unmarkDue(id: string, tenant?: string): Promise<void> {
    const t = tenant ?? (await this.redis.hget(sessionKeys(id).meta, 'tenant'));
    await Promise.all([
      this.redis.zrem(RUNS_KEY, id),
      t !== null ? this.redis.zrem(tenantRunsKey(t), id) : null,
    ]);
  }

  /**
   * Takes a slot among the tenant's active runs for session `id`, or throws 429 `quota_exceeded`
   * (`details.quota: "TENANT_MAX_ACTIVE_RUNS"`). The count lives in Redis (tenantRunsKey), so it holds across
   * replicas; it cannot join the session's script (another hash tag), so a slot may outlive its run (a crash
   * between a run's last commit and `unmarkDue`, a start refused after its slot was taken). At the limit, such
   * slots are found by reading their sessions — a slot whose session is not `running` is stale — and dropped, so
   * the count is the number of running sessions, whatever crashed. Without a tenant (a session not written yet), or
   * with no limit, nothing is counted.
   */
  async takeRunSlot(tenant: string | null, id: string): Promise<void> {
    const max = this.options.tenantMaxActiveRuns ?? 0;
    if (max <= 0 || tenant === null) return;
    const key = tenantRunsKey(tenant);
    for (let attempt = 0; ; attempt++) {
      const now = Date.now();
      if ((await this.redis.sessRunSlotTake(key, id, now, max)) === 1) return;
      if (attempt > 0) throw quotaExceeded('TENANT_MAX_ACTIVE_RUNS', max, 'active runs');
      const rows = await this.redis.zrangebyscore(key, '-inf', now - RUN_SLOT_GRACE_MS, 'WITHSCORES');
      const seen: Array<[string, string]> = [];
      for (let i = 0; i < rows.length; i += 2) seen.push([rows[i]!, rows[i + 1]!]);
      const states = await Promise.all(
        seen.map(([sid]) => this.redis.hmget(sessionKeys(sid).meta, 'status', 'tenant')),
      );
      const stale = seen.filter((_, i) => states[i]![0] !== 'running' || states[i]![1] !== tenant);
      if (stale.length === 0) throw quotaExceeded('TENANT_MAX_ACTIVE_RUNS', max, 'active runs');
      await this.redis.sessRunSlotPrune(key, ...stale.flat());
    }
  }

  /** Counts a session that is running among its tenant's active runs, without a check (see `takeRunSlot`). */
  async holdRunSlot(tenant: string, id: string): Promise<void> {
    if ((this.options.tenantMaxActiveRuns ?? 0) > 0)
      await this.redis.zadd(tenantRunsKey(tenant), Date.now(), id);
  }

  /** The sessions holding a slot among the tenant's active runs (tests, metrics). */
  runSlots(tenant: string): Promise<string[]> {
    return this.redis.zrange(tenantRunsKey(tenant), 0, -1);
  }

  /** Running sessions whose claim time has passed. */
  dueRuns(nowMs: number, limit: number): Promise<string[]> {
    return this.redis.zrangebyscore(RUNS_KEY, 0, nowMs, 'LIMIT', 0, limit);
  }

  /** Index members sort by creation time then id, so a lexicographic range pages the list exactly. */
  private indexMember(createdAt: number, id: string): string {
    return `${String(createdAt).padStart(15, '0')}:${id}`;
  }

  async index(tenant: string, id: string, createdAt: number): Promise<void> {
    await this.redis.zadd(tenantIndexKey(tenant), 0, this.indexMember(createdAt, id));
  }

  /** How many sessions `tenant` keeps (its index: one ZCARD). */
  countSessions(tenant: string): Promise<number> {
    return this.redis.zcard(tenantIndexKey(tenant));
  }

  async unindex(tenant: string, id: string, createdAt: number): Promise<void> {
    await this.redis.zrem(tenantIndexKey(tenant), this.indexMember(createdAt, id));
  }

  /**
   * A tenant's sessions, newest first. The cursor is the index member of the last item of the previous page.
   * Entries whose session is gone are dropped from the index on the way; a status filter reads at most 20 index
   * pages per call, so one request stays bounded.
   */
  async list(
    tenant: string,
    opts: { limit: number; cursor?: string | undefined; status?: Status | undefined },
  ): Promise<{ items: SessionState[]; next: string | null }> {
    const key = tenantIndexKey(tenant);
    if (opts.cursor && !/^\d{15}:ses_[A-Za-z0-9]+$/.test(opts.cursor)) {
      throw new AppError(400, 'invalid_cursor', 'The cursor is not one this service gave.');
    }
    let max = opts.cursor ? `(${opts.cursor}` : '+';
    const items: SessionState[] = [];
    let lastMember: string | null = null;
    let exhausted = false;
    const pageSize = opts.status ? 100 : opts.limit;
    for (let round = 0; round < 20 && items.length < opts.limit; round++) {
      const members = await this.redis.zrevrangebylex(key, max, '-', 'LIMIT', 0, pageSize);
      const states = await Promise.all(members.map((m) => this.load(m.slice(16))));
      let read = 0;
      for (; read < members.length && items.length < opts.limit; read++) {
        const member = members[read]!;
        const s = states[read];
        lastMember = member;
        if (!s) await this.redis.zrem(key, member);
        else if (!opts.status || s.status === opts.status) items.push(s);
      }
      if (members.length < pageSize && read === members.length) {
        exhausted = true;
        break;
      }
      max = `(${lastMember}`;
    }
    // A short page with a cursor means the bounded scan stopped before the end of the index: ask again from there.
    const more = items.length === opts.limit || !exhausted;
    return { items, next: more && lastMember ? lastMember : null };
  }

  /** Deletes every key of the session; its event log keeps a `session.deleted` event for `ttlMs`. */
  async destroy(id: string, tenant: string, createdAt: number, ttlMs = 60_000): Promise<boolean> {
    const k = sessionKeys(id);
    const tap = this.eventTap?.(id, ['session.deleted'], tenant);
    if (tap?.ready) await tap.ready;
    const done = await this.redis.sessDestroy(
      ...this.keyList(k),
      JSON.stringify({ id }),
      ttlMs,
      eventsChannel(id),
    );
    if (done === 1) tap?.landed();
    await Promise.all([this.unindex(tenant, id, createdAt), this.unmarkDue(id, tenant)]);
    return done === 1;
  }

  async publishControl(id: string, what: 'cancel' | 'interrupt' | 'delete' | 'params'): Promise<void> {
    await this.redis.publish(controlChannel(id), what);
  }
}

/** What one compaction summarized (an element of the `compacted` list). */
export interface CompactedSegment {
  at_iteration: number;
  messages: StoredMessage[];
}

export interface IterationRecord {
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
  usage: Usage;
  tool_calls: Array<{ id: string; name: string }>;
  started_at: string;
  completed_at: string;
  timings: { upstream_ms: number; first_event_ms: number | null; tools_ms: number | null };
}

function parseEntry([id, fields]: [string, string[]]): StoredEvent {
  const f: Record<string, string> = {};
  for (let i = 0; i < fields.length; i += 2) f[fields[i]!] = fields[i + 1]!;
  return {
    id,
    type: f['t'] ?? 'unknown',
    data: f['d'] ?? 'null',
    revision: Number(f['r'] ?? 0),
    at: Number(f['at'] ?? 0),
  };
}

export const parseStreamEntry = parseEntry;
