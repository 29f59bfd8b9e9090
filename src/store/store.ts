/**
 * SessionStore: every read and write of a session's keys (meta hash, history, records, queue, events, the compacted
 * segments), each method one round trip whose atomicity its JSDoc states. What the meta hash holds and how it is
 * encoded is in session-state.ts (the pending step's fields in pending.ts), an `apply`'s ops in apply-ops.ts; the
 * lease, the due runs and the tenants' run slots in runs.ts (`store.runs`); the event log reader (events.ts),
 * channels (channels.ts) and memory files (memory.ts) touch other keys; the tenants' indexes of their sessions
 * and the list read through them are session-index.ts (`store.index`).
 *
 * Over 400 lines: every read and write of a session's own keys is one method here, which keeps them behind one door.
 */
import { randomBytes } from 'node:crypto';
import { heavyStep } from '../tenant-turns.js';
import {
  FencedOut,
  InvalidRequest,
  InvalidStatus,
  SessionExists,
  notFound,
  revisionMismatch,
} from '../errors.js';
import type { StoredBlock, StoredMessage } from '../history.js';
import {
  AlreadyApplied,
  AlreadyPosted,
  opsEventTypes,
  setsRunning,
  type ApplyOps,
  type ApplyResult,
  type Guard,
} from './apply-ops.js';
import {
  channelName,
  controlChannel,
  eventsChannel,
  eventLogKeys,
  sessionKeys,
  type SessionKeys,
} from './keys.js';
import { decodeStored } from './decode.js';
import { defineLuaCommands, type RedisClient } from './lua-commands.js';
import type { SessionKeyList } from './lua/commands.js';
import { RunQueue } from './runs.js';
import { GIVE_BACK_TTL_MS, StorageQuota, decodeGiveBack } from './storage-quota.js';
import { isOutOfMemory } from './unavailable.js';
import { ACTIONS_DUE_KEY, DueSet, EXPIRY_DUE_KEY } from './due.js';
import { PriceTable, type ModelPrices } from '../cost/prices.js';
import { TenantSpend, parseOpenSpend, type OpenSpend } from '../cost/spend.js';
import { SessionIndex } from './session-index.js';
import { RedisClock } from '../redis/clock.js';
import {
  childUsageIncr,
  decodeFields,
  isControl,
  type CompactedSegment,
  type AppliedEntry,
  type IterationRecord,
  type PostedEntry,
  type SessionState,
} from './session-state.js';

export interface StoredEvent {
  id: string;
  type: string;
  /** Event data as stored (JSON text). */
  data: string;
  revision: number;
  at: number;
}

/**
 * The numbers under which a batch of live events is written (lua/includes/event-mark.lua): the writer's `token` and
 * the number of the batch's first event. The events already written under the same numbers are skipped.
 */
export interface EventMark {
  token: string;
  first: number;
}

/** No mark: the events are written as they are. */
const NO_MARK: EventMark = { token: '', first: 0 };

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
export interface StoreOptions {
  /** Most events a session's log keeps (EVENT_LOG_MAX). */
  eventLogMax: number;
  /** Most bytes a session's log keeps (EVENT_LOG_MAX_BYTES; see lua/includes/event-log.lua). */
  eventLogMaxBytes?: number;
  /** Most bytes of the user turn queued follow-ups form (MAX_TURN_BYTES); over it a follow-up is refused (413). */
  maxTurnBytes?: number;
  /** Most sessions of one tenant running at once, across replicas (TENANT_MAX_ACTIVE_RUNS); 0 or absent: no limit. */
  tenantMaxActiveRuns?: number;
  /** Most bytes one tenant stores (TENANT_MAX_BYTES, see storage-quota.ts); 0 or absent: no limit. */
  tenantMaxBytes?: number;
  /** MODEL_PRICES: over the list prices (src/cost/prices.ts). */
  modelPrices?: ModelPrices | undefined;
  /** TENANT_MAX_COST_USD_PER_DAY; 0 or absent: no cap. */
  tenantMaxCostUsdPerDay?: number;
  /** USAGE_RETENTION_DAYS: how long a tenant's day of usage is kept (default 400). */
  usageRetentionDays?: number;
  /** SESSION_TTL_S: the `ttl_s` of a session created without one; 0 or absent: kept for ever. */
  sessionTtlS?: number;
  /** ACTION_TIMEOUT_MIN_S: the least `action_timeout_s` (default 10; lower only in tests). */
  actionTimeoutMinS?: number;
  /**
   * How long the event log of a deleted session (a DELETE, or its TTL) keeps its `session.deleted` event (ms; default
   * 60000), and a deleted schedule's its `schedule.deleted`.
   */
  deletedLogTtlMs?: number;
}

/** Defaults of the optional StoreOptions (the config's). */
export const EVENT_LOG_MAX_BYTES = 16 * 1024 * 1024;
export const MAX_TURN_BYTES = 4 * 1024 * 1024;

/**
 * A create whose history holds more bytes than this is staged in parts (Store `stageHistory`): below it one script
 * takes the history as it always did (a create's body is bounded by BODY_LIMIT, a fork's copy only by the tenant's
 * storage quota).
 */
const STAGE_MIN_BYTES = 1024 * 1024;
/** Most bytes of one part of a staged history (a message larger than this is a part of its own). */
const STAGE_PART_BYTES = 256 * 1024;
/** The expiry of a staged history (ms): the create's write renames it first, a create that failed leaves it. */
const STAGE_TTL_MS = 10 * 60_000;

/** UTF-8 bytes of `list` together: what Redis stores of it. */
const bytesOf = (list: readonly string[]) => list.reduce((n, m) => n + Buffer.byteLength(m), 0);

/**
 * 413 for a client's results that would take the pending step's results to `bytes` together, past MAX_TURN_BYTES
 * (`limit`): as a follow-up over it is refused.
 */
export const resultsTooLarge = (bytes: number, limit: number) =>
  new InvalidRequest(
    'payload_too_large',
    `The tool results of the pending step would be ${bytes} bytes together, more than MAX_TURN_BYTES (${limit}).`,
    { limit, turn_bytes: bytes, quota: 'MAX_TURN_BYTES' },
  );

/** Whether `ops` write a tool result (a `result:<id>` field not emptied) with their `hset`. */
const writesResult = (ops: ApplyOps): boolean =>
  Object.entries(ops.hset ?? {}).some(([k, v]) => k.startsWith('result:') && v !== '');

/** A stored message this large is decoded as a heavy step of its tenant's (tenant-turns.ts). */
const HEAVY_MESSAGE_BYTES = 64 * 1024;

/** The keys of the segments a session keeps in keys of their own, from its meta field `seg_keys` (suffixes). */
const segmentKeysOf = (k: SessionKeys, field: string | null): string[] =>
  (field ?? '')
    .split(' ')
    .filter((s) => s !== '')
    .map((s) => k.segment + s);

/** A kept segment from its JSON text's bytes. */
const decodeSegment = (text: Buffer): CompactedSegment =>
  decodeStored<CompactedSegment>(text.toString('utf8'));

/** What meta `seg_bytes` keeps of a segment (apply-8.lua `compact`); `endsWithUser` null when it does not say. */
export interface SegmentSize {
  bytes: number;
  at_iteration: number;
  endsWithUser: boolean | null;
}

/**
 * The key suffix a stub of the `compacted` list names and the byte length of the segment kept there
 * (`{"at_iteration":n,"key":"<suffix>","bytes":b}`, apply-8.lua `compact`: a segment kept in a key of its own,
 * keys.ts `segment`), or null for a segment the list holds itself.
 */
function segmentStubOf(raw: Buffer): { key: string; bytes: number } | null {
  if (raw.length > 200) return null;
  const m = /^\{"at_iteration":\d+,"key":"([\w-]+)","bytes":(\d+)\}$/.exec(raw.toString('utf8'));
  return m ? { key: m[1]!, bytes: Number(m[2]) } : null;
}

/**
 * Most bytes of kept segments one page of the `compacted` list sends (segments-page-1.lua). A segment this version
 * keeps in the list itself is of about 1 MiB at most (STAGE_MIN_BYTES of messages; a larger one has a key of its
 * own), so a page holds one at least; one larger (an older version's) is read in parts of SEGMENT_PIECE_BYTES.
 */
const SEGMENT_PAGE_BYTES = 2 * 1024 * 1024;
/**
 * Most bytes of one read of a segment too large for a page: a GETRANGE of the key of its own, or a part of the list's
 * element (segment-part-1.lua). A reply of megabytes holds every other tenant's commands behind it on the one
 * connection the replicas share (and one of seconds makes the health guard answer 503 to all).
 */
const SEGMENT_PIECE_BYTES = 1024 * 1024;
/** Most segments one page of the `compacted` list sends (segments-page-1.lua's own bound on its work). */
const SEGMENT_PAGE_COUNT = 256;

/**
 * The byte lengths meta `seg_bytes` gives of a session's kept segments, with the record each one's compaction made
 * (segment index → bytes and `at_iteration`, as the segment's JSON has it), `segments` being how
 * many are kept: `<count> <bytes>,<at_iteration>,<u|a> …` (apply-8.lua `compact`; `u`: the segment ends with a user
 * turn), the entries for the segments just below `count`, oldest first. Segments are only ever appended, so an entry names its segment whatever was pushed
 * since (an older version's compaction keeps no entry: its segment has none). An entry of another form (`?`, an older
 * version's plain number, anything not a decimal), a count past the segments kept, or a field of another form gives
 * nothing: that segment's length is unknown, and a reader weighs it (segmentIfFits).
 */
export function segmentSizes(field: string | null, segments: number): Map<number, SegmentSize> {
  const sizes = new Map<number, SegmentSize>();
  const [head, ...entries] = (field ?? '').split(' ');
  if (head === undefined || !/^\d+$/.test(head)) return sizes;
  const count = Number(head);
  if (count > segments) return sizes;
  entries.forEach((e, j) => {
    const m = /^(\d+),(\d+)(?:,([ua]))?$/.exec(e);
    const index = count - entries.length + j;
    if (m && index >= 0) {
      sizes.set(index, {
        bytes: Number(m[1]),
        at_iteration: Number(m[2]),
        endsWithUser: m[3] === undefined ? null : m[3] === 'u',
      });
    }
  });
  return sizes;
}

/**
 * Where a walk of the kept segments (oldest first) that looks for message `from` of the session's whole record begins:
 * segment `index`, whose first message is message `start`, from meta `seg_counts` (apply-8.lua `compact`:
 * `<index> <start> <count> …`, each segment's message count from segment <index> on). The segment of that run that
 * holds `from`; past the run's last, the segment after it (one an older version pushed, with no count: the walk
 * counts on from there). Null, the walk from the first segment, when the field says nothing of `from`: none kept (a
 * session whose segments are all older than counts), one of another form, or `from` before a run that starts at a
 * later segment. A run from segment 0 that starts past message 0 is a fork's (its history began at message `start`
 * of its source's record, src/sessions/fork.ts): nothing before `start` is kept, and a walk from segment 0 counting
 * from message 0 would take its messages for others; segment 0 at `start` is answered, which holds none before it.
 */
export function segmentFor(field: string | null, from: number): { index: number; start: number } | null {
  const m = /^(\d+) (\d+)((?: \d+)*)$/.exec(field ?? '');
  if (!m) return null;
  let index = Number(m[1]);
  let start = Number(m[2]);
  if (from < start) return index === 0 ? { index, start } : null;
  for (const count of m[3]!.split(' ')) {
    if (count === '') continue;
    if (from < start + Number(count)) break;
    index++;
    start += Number(count);
  }
  return { index, start };
}

/**
 * The whole-record index the history of the last `PUT …/messages` started at, from meta `replaced_base`
 * (`<replaced_at>:<msg_base>`, src/sessions/replace.ts), when it belongs to that PUT: its `replaced_at` is the meta's
 * (`at`). Null otherwise: no such field, one of another form (an older version's), or one a later PUT by an older
 * version (which sets `replaced_at` alone) left behind; the reader then tells the replaced segments by their record.
 */
export function replacedBaseOf(field: string | null, at: number): number | null {
  const m = /^(\d+):(\d+)$/.exec(field ?? '');
  return m && Number(m[1]) === at ? Number(m[2]) : null;
}

/**
 * The session store: every read and write of session state goes through here. Writes are single Lua scripts over
 * the keys of one session; the guarantees of each are in its JSDoc.
 */
export class SessionStore {
  readonly redis: RedisClient;
  /** Leases, the due runs and the tenants' run slots (runs.ts). */
  readonly runs: RunQueue;
  /** Deadlines of the actions `requires_action` sessions wait for, and sessions' expiry times (due.ts). */
  readonly actionsDue: DueSet;
  readonly expiryDue: DueSet;
  /**
   * Run by `destroy` once a session's keys are gone (a client's DELETE or its TTL): what other features keep for a
   * session outside its keys (client tokens, tool tasks, …) is dropped here. Each hook gets the session and tenant.
   */
  readonly destroyHooks: Array<(id: string, tenant: string) => Promise<void>> = [];
  /** Tenants' spend per UTC day, the price table, the daily cap (src/cost/spend.ts). */
  readonly spend: TenantSpend;
  /** Set by the webhooks plugin; see EventTap. */
  eventTap: EventTap | undefined;
  /** The tenants' storage counts (TENANT_MAX_BYTES): a session's writes here, its client tokens' (client-tokens.ts). */
  readonly storage: StorageQuota;
  /** Tenants of sessions seen by `load` (a session's tenant never changes): a run's commits count its bytes. */
  private readonly tenants = new Map<string, string>();
  /** The tenants' indexes of their sessions, and the list read through them (session-index.ts). */
  readonly index: SessionIndex;
  /**
   * Redis's clock as this process reckons it (src/redis/clock.ts), fed by the sweeps' due reads: the clock of the
   * action deadlines this process writes and checks, and of the schedules' times.
   */
  readonly clock = new RedisClock();

  constructor(
    redis: RedisClient,
    readonly options: StoreOptions,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sess');
    this.redis = redis;
    this.runs = new RunQueue(redis, options.tenantMaxActiveRuns ?? 0, this.clock);
    this.actionsDue = new DueSet(redis, ACTIONS_DUE_KEY);
    this.expiryDue = new DueSet(redis, EXPIRY_DUE_KEY);
    this.spend = new TenantSpend(redis, {
      prices: new PriceTable(options.modelPrices),
      capUsdPerDay: options.tenantMaxCostUsdPerDay ?? 0,
      retentionDays: options.usageRetentionDays ?? 400,
      now: () => this.clock.now(),
    });
    this.storage = new StorageQuota(redis, options.tenantMaxBytes ?? 0);
    this.index = new SessionIndex(
      redis,
      (h) => this.decodeMeta(h),
      () => this.clock.now(),
    );
  }

  private async tenantOf(id: string, known?: string): Promise<string | null> {
    return known ?? this.tenants.get(id) ?? (await this.redis.hget(sessionKeys(id).meta, 'tenant'));
  }

  /**
   * Pushes a create's history to `key` in parts of at most STAGE_PART_BYTES (a larger message alone), each with the
   * key's expiry in the same MULTI: no one command, and no script decoding it all, holds Redis for the whole of a
   * large history (a fork copies up to the tenant's storage quota). A create that never lands leaves the key to
   * its expiry.
   */
  private async stageHistory(key: string, msgs: readonly string[]): Promise<void> {
    for (let i = 0; i < msgs.length;) {
      let bytes = Buffer.byteLength(msgs[i]!);
      let end = i + 1;
      for (; end < msgs.length; end++) {
        const next = Buffer.byteLength(msgs[end]!);
        if (bytes + next > STAGE_PART_BYTES) break;
        bytes += next;
      }
      const res =
        (await this.redis
          .multi()
          .rpush(key, ...msgs.slice(i, end))
          .pexpire(key, STAGE_TTL_MS)
          .exec()) ?? [];
      for (const [e] of res) if (e) throw e;
      i = end;
    }
  }

  /**
   * Appends the segment a compaction keeps, `{"at_iteration":n,"messages":[…]}` made of `msgs` (the moved messages'
   * JSON as stored), to `key` in parts of at most STAGE_PART_BYTES, each with the key's expiry in the same MULTI, as
   * stageHistory does: no one command, and no script building or pushing it, holds Redis for the whole segment.
   * Returns its byte length.
   */
  private async stageSegment(key: string, atIteration: number, msgs: readonly string[]): Promise<number> {
    let parts: Buffer[] = [];
    let size = 0;
    let total = 0;
    const flush = async () => {
      if (size === 0) return;
      const res =
        (await this.redis
          .multi()
          .append(key, Buffer.concat(parts, size))
          .pexpire(key, STAGE_TTL_MS)
          .exec()) ?? [];
      for (const [e] of res) if (e) throw e;
      total += size;
      parts = [];
      size = 0;
    };
    const add = async (text: string) => {
      // Cut by bytes: APPEND joins bytes, so a part may end inside a character.
      const buf = Buffer.from(text, 'utf8');
      for (let at = 0; at < buf.length;) {
        const piece = buf.subarray(at, at + STAGE_PART_BYTES - size);
        parts.push(piece);
        size += piece.length;
        at += piece.length;
        if (size >= STAGE_PART_BYTES) await flush();
      }
    };
    await add(`{"at_iteration":${atIteration},"messages":[`);
    for (let i = 0; i < msgs.length; i++) await add(i === 0 ? msgs[i]! : `,${msgs[i]!}`);
    await add(']}');
    await flush();
    return total;
  }

  private keyList(k: SessionKeys): SessionKeyList {
    return [k.meta, k.msgs, k.iters, k.queue, k.events, k.lease, k.compacted];
  }

  /**
   * Applies `ops` atomically if `guard` holds (fence, revision, status, existence); otherwise writes nothing and
   * throws: FencedOut, 412 revision_mismatch, 409 invalid_status (with the current status), 404 session_not_found.
   * Bumps the revision by one, stamps `updated_at`, writes the events with the new revision (with `keep_revision`:
   * neither, and the events carry none), and publishes the last event id on the session's events channel — all in
   * one round trip. `tenant`, when the caller knows it (a
   * create, a request of the tenant), tells the event tap whose session it is from its first write.
   * A change that starts a run (sets `running`) first takes a slot among the tenant's active runs (429
   * `quota_exceeded` when TENANT_MAX_ACTIVE_RUNS are running) and registers the run as due (the tenant read from
   * the session when not given). And, unless `costCap` is false, a tenant over its daily dollar cap starts no run
   * (429 `quota_exceeded`, `cost_usd_per_day`); a run started anyway stops before its first model request. Unless
   * `storageCap` is false (a write the service makes on its own: a tool task's result, a deadline; a client's stop: a
   * cancel, a denial), a client's write that adds bytes while the tenant is at TENANT_MAX_BYTES is refused (429); the
   * bytes are counted either way.
   * With `resultsCap` (a client's results, a reviewer's replacement), a change whose `hset` would take the step's
   * tool results past MAX_TURN_BYTES together is refused (413 `payload_too_large`), checked in the script that writes
   * them; the service holds the results it takes from tools to the bound itself (pending.ts `fitResults`).
   */
  async apply(
    id: string,
    guard: Guard,
    ops: ApplyOps,
    tenant?: string,
    {
      costCap = true,
      storageCap = true,
      resultsCap = false,
    }: { costCap?: boolean; storageCap?: boolean; resultsCap?: boolean } = {},
  ): Promise<ApplyResult> {
    const k = sessionKeys(id);
    // Bytes added are counted in the session (same script) and then the tenant (see storage-quota.ts), with those the
    // script counts of what the change rewrites. Whose session it is: known, or learnt by `load` (a run's), else read.
    const owner = await this.tenantOf(id, tenant);
    let added = 0;
    if (owner !== null) {
      const checked = await this.storage.check(owner, ops, guard, storageCap);
      added = checked.added;
      if (added !== 0) ops = { ...ops, hincr: { ...ops.hincr, bytes: added } };
      if (checked.room !== undefined) guard = { ...guard, room: checked.room };
    }
    // A change that makes the session `running` registers it in the run queue first: should the store fail between
    // the two writes, a due entry without a running session is dropped by the sweep, whereas a running session
    // without a due entry would never run. (`runs:due` is a global key, so it cannot join the session's script.)
    // Its run slot is taken before both, for the same reason: a slot without a running session is dropped later.
    if (setsRunning(ops)) {
      // The tenant read above, not read again (one HGET fewer for a run started without it given: a leftover
      // compaction's): a session's `tenant` is written by its create and never changed, and its id is never another
      // tenant's (made at random, or from the tenant's own schedule or parent session), so a second read could find
      // no other. Neither read is atomic with the script anyway: its guard refuses a session that moved on.
      const t = owner;
      // Over the tenant's daily dollar cap, no run starts (429 `quota_exceeded`, `cost_usd_per_day`).
      if (costCap) await this.spend.assertUnderCap(t);
      await this.runs.start(t, id);
    }
    // A new action deadline is registered before the write that sets it (an early entry is moved on by the sweep).
    const warnAt = Number(ops.hset?.['act_warn'] ?? ops.queue?.none?.hset?.['act_warn']);
    if (warnAt > 0) await this.actionsDue.add(id, warnAt);
    const tap = this.eventTap?.(id, opsEventTypes(ops), tenant);
    if (tap?.ready) await tap.ready;
    const turnMax = this.maxTurnBytes;
    if (resultsCap && writesResult(ops)) guard = { ...guard, results_max: turnMax };
    const { stage, staged, ops: sent } = await this.stageLarge(k, guard, ops);
    ops = sent;
    const res = await this.redis.sessApply(
      ...this.keyList(k),
      stage,
      JSON.stringify(ops.queue_push ? { ...guard, turn_max: turnMax } : guard),
      JSON.stringify(ops),
      this.options.eventLogMax,
      channelName(this.redis, eventsChannel(id)),
      NOTICE_MAX_BYTES,
      this.options.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
    );
    if (res[0] === 'ERR') {
      const code = String(res[1]);
      const current = String(res[2]);
      if (staged) await this.redis.unlink(stage).catch(() => undefined); // Else its expiry drops it.
      throw this.refusal(id, code, current, turnMax);
    }
    tap?.landed();
    if (owner !== null) await this.storage.add(owner, added + Number(res[6]));
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

  /**
   * What of `ops` an `apply` stages before its script rather than hand it whole (stageHistory, stageSegment): a
   * create's history of more than STAGE_MIN_BYTES (the ops then carry `stage: { count }` in place of `push_msgs`), and
   * a compaction's moved messages (apply-ops.ts `compact`: taken out of the ops either way; a segment of more than
   * STAGE_MIN_BYTES is staged and named by `compact.staged`). `stage` is the key the script is given: the one staged
   * (the segment's when both are), else `<k.stage>-`, which nothing writes; `staged` says whether it was written.
   */
  private async stageLarge(
    k: SessionKeys,
    guard: Guard,
    ops: ApplyOps,
  ): Promise<{ stage: string; staged: boolean; ops: ApplyOps }> {
    let stage = `${k.stage}-`;
    let staged = false;
    if (guard.create && ops.push_msgs && bytesOf(ops.push_msgs) > STAGE_MIN_BYTES) {
      stage = k.stage + randomBytes(6).toString('base64url');
      staged = true;
      await this.stageHistory(stage, ops.push_msgs);
      const { push_msgs: pushed, ...rest } = ops;
      ops = { ...rest, stage: { count: pushed.length } };
    }
    if (ops.compact?.messages) {
      // The messages are the script's to read unless the segment is large: then it is built here and staged.
      const { messages, ...compact } = ops.compact;
      if (messages.reduce((n, m) => n + Buffer.byteLength(m), 0) > STAGE_MIN_BYTES) {
        const suffix = randomBytes(6).toString('base64url');
        stage = k.segment + suffix;
        staged = true;
        const bytes = await this.stageSegment(stage, compact.at_iteration, messages);
        ops = { ...ops, compact: { ...compact, staged: { key: suffix, bytes } } };
      } else {
        ops = { ...ops, compact };
      }
    }
    return { stage, staged, ops };
  }

  /**
   * The error an `apply` throws for its script's refusal `code` (`current`: what the script says with it, the current
   * revision, status, entry or byte count; `turnMax`: MAX_TURN_BYTES as the write was checked against it). A code
   * not named here is the session's absence (404 `session_not_found`).
   */
  private refusal(id: string, code: string, current: string, turnMax: number): Error {
    if (code === 'fenced') return new FencedOut(id);
    if (code === 'revision') return revisionMismatch(Number(current));
    if (code === 'status') return new InvalidStatus(current);
    if (code === 'exists') return new SessionExists();
    if (code === 'posted') return new AlreadyPosted(decodeStored<PostedEntry>(current));
    if (code === 'applied') return new AlreadyApplied(decodeStored<AppliedEntry>(current));
    if (code === 'results_too_large') return resultsTooLarge(Number(current), turnMax);
    if (code === 'storage') return this.storage.refusal();
    if (code === 'turn_too_large') {
      return new InvalidRequest(
        'payload_too_large',
        `The user turn this message joins would be ${current} bytes, more than MAX_TURN_BYTES (${turnMax}).`,
        { limit: turnMax, turn_bytes: Number(current), quota: 'MAX_TURN_BYTES' },
      );
    }
    return notFound();
  }

  /** MAX_TURN_BYTES: most bytes of a user turn, follow-ups' (the store refuses more) or a step's tool results. */
  get maxTurnBytes(): number {
    return this.options.maxTurnBytes ?? MAX_TURN_BYTES;
  }

  /** Whether the client is a Redis Cluster client (which may send a pipeline later than it was made). */
  get isCluster(): boolean {
    return this.redis.isCluster;
  }

  /**
   * The marker of the last commit that landed (see the engine's commit), and the session's open spend (OpenSpend,
   * oldest first: that commit's last, if it billed a turn, after those its run had not recorded): one HMGET.
   */
  async lastCommit(id: string): Promise<{ marker: string | null; spendOpen: OpenSpend[] }> {
    const [marker, open] = await this.redis.hmget(sessionKeys(id).meta, 'last_commit', 'spend_open');
    return { marker: marker ?? null, spendOpen: parseOpenSpend(open) };
  }

  /** The session, or null. One HGETALL. */
  async load(id: string): Promise<SessionState | null> {
    return this.decodeMeta(await this.redis.hgetall(sessionKeys(id).meta));
  }

  /** A session's meta hash (HGETALL's reply) decoded; null for a hash that is not a session's (an empty one). */
  private decodeMeta(h: Record<string, string>): SessionState | null {
    if (!h['id']) return null;
    const s = decodeFields(h);
    if (this.tenants.size >= 10_000) this.tenants.clear();
    this.tenants.set(s.id, s.tenant);
    return s;
  }

  /** The session if it exists and belongs to `tenant`; 404 otherwise (another tenant's session is not found). */
  async loadFor(tenant: string, id: string): Promise<SessionState> {
    const s = await this.load(id);
    if (!s || s.tenant !== tenant) throw notFound();
    return s;
  }

  /**
   * Whether `id` is a session of `tenant` deleted while its event log is kept (destroy-11.lua writes its tenant with
   * the delete, expiring with the log). Only for a session not found: one GET.
   */
  async deletedFor(tenant: string, id: string): Promise<boolean> {
    return (await this.redis.get(sessionKeys(id).gone)) === tenant;
  }

  async history(id: string, start = 0, end = -1): Promise<StoredMessage[]> {
    const raw = await this.redis.lrange(sessionKeys(id).msgs, start, end);
    return raw.map((m) => decodeStored<StoredMessage>(m));
  }

  /**
   * The whole history for an answer to `tenant`: each message's JSON text as stored (what the answer is made of:
   * the store writes every message as `JSON.stringify` of it, so the text is the message's own JSON, and the tests'
   * response check compares the answer with the body's stringify), its last message decoded, and the rest decoded
   * only when asked for (`messages()`: a response check, a compacted listing). A large message (HEAVY_MESSAGE_BYTES
   * or more) is made text as one heavy step of the tenant's (tenant-turns.ts): a 2 MB history was ~40 ms of the loop
   * in one go (its parse, then its answer's stringify), ahead of every other tenant's requests; it is not parsed
   * at all for an answer sent unchecked.
   */
  async historyForAnswer(
    tenant: string,
    id: string,
  ): Promise<{ texts: string[]; last: StoredMessage | null; messages(): StoredMessage[] }> {
    // As bytes: decoding each to text is part of its step (ioredis would decode them all as the reply arrives).
    const raw = await this.redis.lrangeBuffer(sessionKeys(id).msgs, 0, -1);
    const texts: string[] = [];
    for (const m of raw) {
      if (m.length >= HEAVY_MESSAGE_BYTES) {
        const wait = heavyStep(tenant);
        if (wait) await wait;
      }
      texts.push(m.toString('utf8'));
    }
    const lastText = texts.at(-1);
    let decoded: StoredMessage[] | undefined;
    return {
      texts,
      last: lastText === undefined ? null : decodeStored<StoredMessage>(lastText),
      messages: () => (decoded ??= texts.map((t) => decodeStored<StoredMessage>(t))),
    };
  }

  /**
   * What compactions summarized: the kept segments, oldest first, read in bounded pieces (segmentTexts), so no
   * reply of Redis is over SEGMENT_PAGE_BYTES however much the segments hold. The answer may be as large as they are:
   * it is a whole-history read of its route (src/plugins/write-guard.ts HISTORY_ROUTES bounds them per tenant).
   */
  async compacted(id: string): Promise<CompactedSegment[]> {
    const segments: CompactedSegment[] = [];
    for await (const text of this.segmentTexts(id)) segments.push(decodeSegment(text));
    return segments;
  }

  /**
   * The kept segments' JSON texts, oldest first from segment `first` (`perPage` at most a page: 1 for a reader that
   * wants the one segment it knows holds its messages): those the list held when its first page was read (segments
   * are only
   * ever appended; one pushed since is not this read's). Each reply bounded: pages of the `compacted` list of at
   * most SEGMENT_PAGE_BYTES (segments-page-1.lua), a segment larger than that in parts of SEGMENT_PIECE_BYTES
   * (segment-part-1.lua), and a segment kept in a key of its own in GETRANGEs of as many (resolveSegment). One page
   * at a time, as the caller takes them: a reader that stops early reads no further. A session deleted meanwhile
   * (its list shorter than the first page said, or gone): SessionNotFound.
   */
  private async *segmentTexts(id: string, first = 0, perPage = SEGMENT_PAGE_COUNT): AsyncGenerator<Buffer> {
    const key = sessionKeys(id).compacted;
    let total = -1;
    for (let i = first; total < 0 || i < total;) {
      const [length, ...page] = await this.redis.sessSegmentsPageBuffer(key, i, SEGMENT_PAGE_BYTES, perPage);
      if (total < 0) total = length;
      else if (length < total) throw notFound();
      if (i < total && page.length === 0) throw notFound();
      for (const element of page) {
        if (i >= total) return;
        const raw = typeof element === 'number' ? await this.elementInParts(id, i, element) : element;
        yield await this.resolveSegment(id, raw);
        i++;
      }
    }
  }

  /**
   * Element `index` of the `compacted` list in parts of SEGMENT_PIECE_BYTES (segment-part-1.lua): `bytes` of them
   * when its length is known, else until a part comes short. Null past the list's end; a list gone after the first
   * part (the session deleted): SessionNotFound.
   */
  private elementInParts(id: string, index: number, bytes: number): Promise<Buffer>;
  private elementInParts(id: string, index: number): Promise<Buffer | null>;
  private async elementInParts(id: string, index: number, bytes?: number): Promise<Buffer | null> {
    const key = sessionKeys(id).compacted;
    const parts: Buffer[] = [];
    let at = 0;
    for (;;) {
      const part = await this.redis.sessSegmentPartBuffer(key, index, at, SEGMENT_PIECE_BYTES);
      if (part === null && at === 0 && bytes === undefined) return null;
      if (part === null || (bytes !== undefined && part.length === 0 && at < bytes)) throw notFound();
      parts.push(part);
      at += part.length;
      if (bytes !== undefined ? at >= bytes : part.length < SEGMENT_PIECE_BYTES)
        return Buffer.concat(parts, at);
    }
  }

  /**
   * A kept segment as the `compacted` list holds it, or, for a stub (a segment staged in a key of its own,
   * apply-8.lua `compact`), the segment that key holds, read in GETRANGEs of SEGMENT_PIECE_BYTES. Segments are never
   * changed once kept, so reading the key after the list, and in pieces, is reading the same segment (a session
   * deleted between reads, its key gone, as not found: SessionNotFound).
   */
  private async resolveSegment(id: string, raw: Buffer): Promise<Buffer> {
    const stub = segmentStubOf(raw);
    if (stub === null) return raw;
    const key = sessionKeys(id).segment + stub.key;
    const pieces: Buffer[] = [];
    for (let at = 0; at < stub.bytes;) {
      // GETRANGE's end is inclusive; on a key that does not exist it answers ''.
      const piece = await this.redis.getrangeBuffer(
        key,
        at,
        Math.min(at + SEGMENT_PIECE_BYTES, stub.bytes) - 1,
      );
      if (piece.length === 0) throw notFound();
      pieces.push(piece);
      at += piece.length;
    }
    return Buffer.concat(pieces, stub.bytes);
  }

  /**
   * The history with the whole-record index of its first message (`msg_base`), how many segments are kept, the byte
   * lengths the meta hash holds of the newest of them (`sizes`: segmentSizes; a segment missing from it has no length
   * known, src/chat/record.ts weighs it with segmentIfFits) and the last `PUT …/messages` (`replaced`: the
   * record count then, -1 for none, and the whole-record index its history started at, null when it is not known
   * for that PUT: replacedBaseOf), read in one MULTI, so they agree (a compaction moves messages, bumps `msg_base`,
   * pushes a segment and adds its length to `seg_bytes` in one script): a chat page (src/chat/record.ts) numbers its
   * messages from this base and reads segments below `segments`. Nothing of the segments is read here.
   */
  async historySnapshot(id: string): Promise<{
    history: StoredMessage[];
    base: number;
    segments: number;
    sizes: Map<number, SegmentSize>;
    replaced: { at: number; base: number | null };
  }> {
    const k = sessionKeys(id);
    const rows = await this.redis
      .multi()
      .hmget(k.meta, 'msg_base', 'seg_bytes', 'replaced_at', 'replaced_base')
      .lrange(k.msgs, 0, -1)
      .llen(k.compacted)
      .exec();
    if (!rows) throw new Error('historySnapshot: the transaction was discarded');
    for (const [err] of rows) if (err) throw err;
    const [fields, raw, segments] = rows.map(([, v]) => v) as [Array<string | null>, string[], number];
    const [base, bytes, replacedAt, replacedBase] = fields;
    const sizes = segmentSizes(bytes ?? null, segments);
    const at = replacedAt && /^\d+$/.test(replacedAt) ? Number(replacedAt) : -1;
    return {
      history: raw.map((m) => decodeStored<StoredMessage>(m)),
      base: Number(base ?? 0),
      segments,
      sizes,
      replaced: { at, base: replacedBaseOf(replacedBase ?? null, at) },
    };
  }

  /**
   * Kept segment `index` (0: the oldest; segments are only ever appended, so an index names the same one for the
   * session's life) and its size in bytes; null past the end. For a segment whose length the reader knows (`bytes`,
   * meta `seg_bytes`) fits: a reader that wants the newest few reads only those, however many the session keeps. One
   * LINDEX when that length is at most SEGMENT_PAGE_BYTES (the list holds the segment, or a stub naming its key),
   * else the element in parts (elementInParts); a segment in a key of its own is read in pieces (resolveSegment).
   */
  async segmentAt(
    id: string,
    index: number,
    bytes: number,
  ): Promise<{ segment: CompactedSegment; bytes: number } | null> {
    const stored =
      bytes <= SEGMENT_PAGE_BYTES
        ? await this.redis.lindexBuffer(sessionKeys(id).compacted, index)
        : await this.elementInParts(id, index);
    if (stored === null) return null;
    const raw = await this.resolveSegment(id, stored);
    return { segment: decodeSegment(raw), bytes: raw.length };
  }

  /**
   * Kept segment `index` if it has at most `most` bytes (`segment` null otherwise: only its length is sent), and its
   * size in bytes; null past the end. With `after` (a record number), a segment made by a compaction recorded at or
   * before it is not sent either (`replaced`: a `PUT …/messages` replaced it, src/chat/record.ts). For a segment
   * whose length the reader does not know: it is weighed inside Redis (segment-if-fits-1.lua), so one too large is
   * never sent; one that fits is sent by that call when it has at most SEGMENT_PAGE_BYTES, else read in parts.
   */
  async segmentIfFits(
    id: string,
    index: number,
    most: number,
    after = -1,
  ): Promise<{ segment: CompactedSegment | null; bytes: number; replaced?: true } | null> {
    const once = Math.min(most, SEGMENT_PAGE_BYTES);
    let raw = await this.redis.sessSegmentIfFitsBuffer(sessionKeys(id).compacted, index, once, after);
    if (raw === null) return null;
    if (raw === -1) return { segment: null, bytes: 0, replaced: true };
    if (typeof raw === 'number') {
      if (raw > most) return { segment: null, bytes: raw };
      // It fits, but not in one reply: the element in parts (a stub, too, whose segment's length was weighed).
      raw = await this.elementInParts(id, index);
      if (raw === null) throw notFound();
    }
    const text = await this.resolveSegment(id, raw);
    return { segment: decodeSegment(text), bytes: text.length };
  }

  /**
   * Where a walk of the segments for message `from` begins (segmentFor, meta `seg_counts`): the segment that holds
   * it, not the first, when the meta hash counts the segments' messages, read one a page (`perPage`: the segment
   * after it is read only if the messages wanted go on into it); else the first, at message 0, in whole pages.
   */
  private async segmentToRead(
    id: string,
    from: number,
  ): Promise<{ index: number; start: number; perPage: number }> {
    const found = segmentFor(await this.redis.hget(sessionKeys(id).meta, 'seg_counts'), from);
    return found ? { ...found, perPage: 1 } : { index: 0, start: 0, perPage: SEGMENT_PAGE_COUNT };
  }

  /**
   * Messages `from` to `to` (inclusive; `from` ≥ 0) of the session's whole record (the kept segments, then the
   * history), as iteration records index them; `base` is the session's `msgBase`. The history is read alone when it
   * holds them; else the segments one at a time, oldest first, from the one that holds `from` (segmentToRead: those
   * before it are not read, unless a session compacted before segments were counted holds it) up to the one that
   * holds `to` (segmentTexts), and the history's part only when `to` is in it.
   */
  async messagesAt(id: string, base: number, from: number, to: number): Promise<StoredMessage[]> {
    if (from >= base) return this.history(id, from - base, to - base);
    const out: StoredMessage[] = [];
    // The whole-record index of the segment's first message: the segments in order, then the history.
    const begin = await this.segmentToRead(id, from);
    let start = begin.start;
    for await (const text of this.segmentTexts(id, begin.index, begin.perPage)) {
      const { messages } = decodeSegment(text);
      for (const m of messages.slice(Math.max(0, from - start), Math.max(0, to + 1 - start))) out.push(m);
      start += messages.length;
      if (start > to) return out;
    }
    if (to < base) return out;
    for (const m of await this.history(id, Math.max(0, from - start), to - start)) out.push(m);
    return out;
  }

  /**
   * The history as it was when the session's whole record had `end` messages (a fork's point): the messages from
   * the summary that stood first then (or from the start) up to `end`, and the whole-record index of the first.
   * The segments are read one at a time, oldest first, from the one that holds message `end` - 1 (segmentToRead)
   * up to the one that holds `end` (segmentTexts). Null when the session does not keep message `end` - 1: a fork's
   * record of messages before those it copied (its first segment starts past them, segmentFor; or it keeps none).
   */
  async historyUntil(
    id: string,
    base: number,
    end: number,
  ): Promise<{ messages: StoredMessage[]; base: number } | null> {
    if (end > base) return { messages: await this.history(id, 0, end - base - 1), base };
    // Before any message (a fork at iteration 0): the empty history, kept or not.
    if (end === 0) return { messages: [], base: 0 };
    const begin = await this.segmentToRead(id, end - 1);
    if (end <= begin.start) return null;
    let start = begin.start;
    for await (const text of this.segmentTexts(id, begin.index, begin.perPage)) {
      const { messages } = decodeSegment(text);
      const next = start + messages.length;
      if (end <= next) return { messages: messages.slice(0, end - start), base: start };
      start = next;
    }
    return null;
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

  /** The newest `count` events of the log (older than `before` when given), newest first. One XREVRANGE. */
  async newestEvents(id: string, count: number, before?: string): Promise<StoredEvent[]> {
    const end = before === undefined ? '+' : `(${before}`;
    const rows = await this.redis.xrevrange(sessionKeys(id).events, end, '-', 'COUNT', count);
    return rows.map(parseEntry);
  }

  /**
   * Appends events that change no session field (stream deltas, turn.started) and publishes their notice, atomically
   * in one script (one round trip), without bumping the revision. Not fenced: a stale writer can add noise to the
   * log, never to the history. With a `mark`, the events already written under it are skipped (a batch sent again
   * after a failure whose effect is unknown: src/engine/live-news.ts).
   */
  async appendEvents(id: string, events: Array<[string, string]>, mark?: EventMark): Promise<void> {
    if (events.length === 0) return;
    const tap = this.eventTap?.(
      id,
      events.map(([type]) => type),
    );
    await this.appendTapped(id, events, tap, mark);
  }

  /**
   * What every script that appends to a session's log takes first (includes/event-log.lua, notice.lua): its meta and
   * log keys, its channel, the log's bounds, now, the notice's bound.
   */
  private logArgs(id: string) {
    const [meta, log] = eventLogKeys(id);
    return [
      meta,
      log,
      channelName(this.redis, eventsChannel(id)),
      this.options.eventLogMax,
      Date.now(),
      NOTICE_MAX_BYTES,
      this.options.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
    ] as const;
  }

  /** appendEvents once the tap was asked (`tap`: what it answered). */
  private async appendTapped(
    id: string,
    events: Array<[string, string]>,
    tap: ReturnType<EventTap> | undefined,
    mark: EventMark = NO_MARK,
  ): Promise<void> {
    const args: Array<string | number> = [...this.logArgs(id), mark.token, mark.first];
    for (const [type, data] of events) args.push(type, data);
    if (tap?.ready) await tap.ready;
    await this.redis.sessAppendEvents(...args);
    tap?.landed();
  }

  /**
   * A tenant tool call's `tool_task.retried` event for its lost (or failed) `attempt` of `round`, written once
   * whoever writes it and however often (tool-retried-2.lua), and only while the session's step waits for the call.
   * True when written now.
   */
  async appendToolRetried(
    id: string,
    call: { toolUseId: string; round: number; attempt: number },
    [type, data]: [string, string],
  ): Promise<boolean> {
    const tap = this.eventTap?.(id, [type]);
    if (tap?.ready) await tap.ready;
    const written = await this.redis.sessToolRetried(
      ...this.logArgs(id),
      call.toolUseId,
      call.round,
      call.attempt,
      type,
      data,
    );
    if (written === 1) tap?.landed();
    return written === 1;
  }

  /**
   * `appendEvents` for several sessions in one script call (append-events-many.lua): the stream relays' batches of
   * one flush, one command and one round trip for all of them. Each session's log and notice are those
   * `appendEvents` writes. The call is sent at once, outside ioredis's auto-pipelining (src/plugins/redis.ts
   * `autoPipeliningIgnoredCommands`: no pipeline built per flush); a session whose webhook tap marks it (a write
   * this one must not overtake, sent auto-pipelined) goes by `appendEvents` after that mark, as do all on a cluster
   * (the sessions' keys are in different slots). A failure fails the whole call: as for appendEvents, the caller
   * loses live news only.
   */
  async appendEventsMany(
    batches: ReadonlyArray<readonly [id: string, events: Array<[string, string]>, mark: EventMark]>,
  ): Promise<void> {
    if (this.isCluster) {
      await Promise.all(batches.map(([id, events, mark]) => this.appendEvents(id, events, mark)));
      return;
    }
    const keys: string[] = [];
    const rest: Array<string | number> = [];
    const tapped: Array<Promise<void>> = [];
    for (const [id, events, mark] of batches) {
      if (events.length === 0) continue;
      const tap = this.eventTap?.(
        id,
        events.map(([type]) => type),
      );
      if (tap) {
        tapped.push(this.appendTapped(id, events, tap, mark));
        continue;
      }
      const [meta, log] = eventLogKeys(id);
      keys.push(meta, log);
      rest.push(channelName(this.redis, eventsChannel(id)), events.length, mark.token, mark.first);
      for (const [type, data] of events) rest.push(type, data);
    }
    if (keys.length > 0) {
      tapped.push(
        this.redis
          .sessAppendEventsMany(
            keys.length,
            ...keys,
            this.options.eventLogMax,
            Date.now(),
            NOTICE_MAX_BYTES,
            this.options.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
            ...rest,
          )
          .then(() => {}),
      );
    }
    // Every call awaited together: one failing leaves no other's rejection unhandled.
    await Promise.all(tapped);
  }

  /**
   * Deletes every key of the session (its client tokens too); its event log keeps a `session.deleted` event (`data`: `{"id"}` and what
   * `reason` adds) for `ttlMs` (default: the store's `deletedLogTtlMs`, DELETED_LOG_TTL_MS). With `revision`, only while the session is still at it: false, nothing written, when
   * a write came first (a swept delete never races a new message). Then the index entries (of its tenant, and of the
   * pairs of `metadata`: the session's, as the caller read it), the due entries and what the `destroyHooks` drop. The
   * index entries are named first in a mark (SessionIndex `deleting`), so that a process killed after the delete's
   * script leaves them for another replica's sweep to drop, not for ever. So are the session's bytes, given back to its
   * tenant's storage count (another slot) after the script, which records them (keys.ts `giveBack`): given back once
   * (StorageQuota `giveBack`) and then the mark dropped, or, the process killed between, by that sweep (`giveBackLeft`).
   */
  async destroy(
    id: string,
    tenant: string,
    createdAt: number,
    opts: { ttlMs?: number; revision?: number; reason?: string; metadata?: Record<string, unknown> } = {},
  ): Promise<boolean> {
    const k = sessionKeys(id);
    const tap = this.eventTap?.(id, ['session.deleted'], tenant);
    if (tap?.ready) await tap.ready;
    const mark = await this.index.deleting(tenant, id, createdAt, opts.metadata ?? {});
    // The session's `bytes` (its part of the tenant's count) is read with the delete, never before it: a write
    // between (a client token's revoke gives its record's bytes back) would be given back twice. Its segment keys go
    // in the same script (destroy-11.lua): a process killed after it leaves none behind.
    let done: number;
    let bytes: number;
    // The id of the delete's `session.deleted`, its record of the bytes it owes (none: the fallback's MULTI below).
    let deleted: string | undefined;
    try {
      [done, bytes, deleted] = await this.redis.sessDestroy(
        ...this.keyList(k),
        k.tokens,
        k.gone,
        k.segment,
        k.giveBack,
        JSON.stringify(opts.reason ? { id, reason: opts.reason } : { id }),
        opts.ttlMs ?? this.options.deletedLogTtlMs ?? 60_000,
        channelName(this.redis, eventsChannel(id)),
        opts.revision === undefined ? '' : String(opts.revision),
        tenant,
        GIVE_BACK_TTL_MS,
      );
    } catch (err) {
      // Redis full (noeviction): a delete frees memory, so it must work then too. Plain UNLINKs are never refused
      // for memory (the script is, when its first write would add); live readers then learn of it by the 404.
      // (A swept delete, guarded by a revision, is not forced: it is tried again by the next sweep.)
      if (!isOutOfMemory(err) || opts.revision !== undefined) throw err;
      // The segment keys as read just before go in the same UNLINK; only those of a compaction that landed between
      // the two are unlinked after it (a kill then leaves them: that compaction's, without expiry).
      const before = segmentKeysOf(k, await this.redis.hget(k.meta, 'seg_keys'));
      // (In one MULTI, for the same reason as the script reads `bytes` itself; neither command is refused then.) No
      // record of the bytes: given back at once below, as before records (a kill between leaves the count high).
      const res =
        (await this.redis
          .multi()
          .hget(k.meta, 'bytes')
          .hget(k.meta, 'seg_keys')
          .unlink(...this.keyList(k), k.tokens, ...before)
          .exec()) ?? [];
      for (const [e] of res) if (e) throw e;
      bytes = Number(res[0]?.[1] ?? 0);
      done = Number(res[2]?.[1] ?? 0) > 0 ? 1 : 0;
      const landed = segmentKeysOf(k, String(res[1]?.[1] ?? '')).filter((key) => !before.includes(key));
      if (landed.length > 0) await this.redis.unlink(...landed);
    }
    if (done === -1) {
      await this.index.undelete(mark);
      return false;
    }
    if (done === 1) tap?.landed();
    this.tenants.delete(id);
    // The bytes are given back before the mark is dropped: a kill before leaves both to a replica's sweep.
    const givenBack = async (): Promise<boolean> => {
      if (done !== 1 || bytes === 0) return true;
      if (deleted === undefined) {
        await this.storage.add(tenant, -bytes).catch((err: unknown) => {
          if (!isOutOfMemory(err)) throw err; // still full after the delete: the count stays high (an upper bound)
        });
        return true;
      }
      try {
        await this.storage.giveBack(tenant, id, deleted, bytes);
      } catch (err) {
        // Still full after the delete: the record and the mark are left for a sweep once there is room.
        if (!isOutOfMemory(err)) throw err;
        return false;
      }
      await this.redis.hdel(k.giveBack, deleted);
      return true;
    };
    await Promise.all([
      givenBack().then((given) => this.index.unindex(mark, !given)),
      this.runs.end(id, tenant, true),
      this.redis.zrem(ACTIONS_DUE_KEY, id),
      this.redis.zrem(EXPIRY_DUE_KEY, id),
      // The seq of its last turn in its tenant's day (src/cost/spend.ts `forget`). A run's record that lands after
      // this leaves the field again: a few bytes, dropped with the hash's expiry.
      this.spend.forget(tenant, id),
      ...this.destroyHooks.map((hook) => hook(id, tenant)),
    ]);
    return done === 1;
  }

  /**
   * What deletes of `id` still owe their tenants' storage counts (keys.ts `giveBack`: left by a process that died
   * after its delete's script), given back once each (StorageQuota `giveBack`), each record then dropped.
   */
  async giveBackLeft(id: string): Promise<void> {
    const key = sessionKeys(id).giveBack;
    for (const [deleted, value] of Object.entries(await this.redis.hgetall(key))) {
      const owed = decodeGiveBack(value);
      if (owed) await this.storage.giveBack(owed.tenant, id, deleted, owed.bytes);
      await this.redis.hdel(key, deleted);
    }
  }

  /**
   * The retention pass's repair of the deletes whose process died after their script (SessionIndex `sweepDeletes`):
   * what each owes its tenant's storage count given back (`giveBackLeft`), then its index entries and mark dropped.
   * `now`: Redis's clock (ms).
   */
  sweepDeletes(now: number): Promise<void> {
    return this.index.sweepDeletes(now, (id) => this.giveBackLeft(id));
  }

  /**
   * A sub-agent's usage into its parent's `u_child_*` counters, once per child whatever becomes of the call it
   * answers (child-usage-1.lua): when it ends, or when it is deleted before (its turns count toward the parent's
   * budget all the same).
   */
  async addChildUsage(parentId: string, child: Pick<SessionState, 'id' | 'usage' | 'cost' | 'childUsage'>) {
    const incr = Object.entries(childUsageIncr(child)).flat();
    await this.redis.sessChildUsage(sessionKeys(parentId).meta, child.id, ...incr);
  }

  async publishControl(id: string, what: 'cancel' | 'interrupt' | 'delete' | 'params'): Promise<void> {
    await this.redis.publish(channelName(this.redis, controlChannel(id)), what);
  }
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
