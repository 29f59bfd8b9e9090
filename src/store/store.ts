/**
 * SessionStore: every read and write of a session's keys (meta hash, history, records, queue, events, the compacted
 * segments), each method one round trip whose atomicity its JSDoc states. What the meta hash holds and how it is
 * encoded is in session-state.ts (the pending step's fields in pending.ts), an `apply`'s ops in apply-ops.ts; the
 * lease, the due runs and the tenants' run slots in runs.ts (`store.runs`); the event log reader (events.ts),
 * channels (channels.ts) and memory files (memory.ts) touch other keys.
 *
 * Over 400 lines: every session read and write is one method here, which keeps the keys behind one door; the
 * listing (`list`, with the metadata filter) is the next part to move to a module of its own.
 */
import {
  FencedOut,
  InvalidRequest,
  InvalidStatus,
  SessionExists,
  notFound,
  revisionMismatch,
} from '../errors.js';
import type { StoredBlock, StoredMessage } from '../history.js';
import { opsEventTypes, setsRunning, type ApplyOps, type ApplyResult, type Guard } from './apply-ops.js';
import {
  channelName,
  controlChannel,
  eventsChannel,
  sessionKeys,
  tenantIndexKey,
  type SessionKeys,
} from './keys.js';
import { decodeStored } from './decode.js';
import { defineLuaCommands, type RedisClient } from './lua-commands.js';
import type { SessionKeyList } from './lua/commands.js';
import { RunQueue } from './runs.js';
import { addedBytes, StorageQuota } from './storage-quota.js';
import { asStoreError, isOutOfMemory } from './unavailable.js';
import { ACTIONS_DUE_KEY, DueSet, EXPIRY_DUE_KEY } from './due.js';
import { PriceTable, type ModelPrices } from '../cost/prices.js';
import { TenantSpend } from '../cost/spend.js';
import {
  MetadataIndex,
  matchesMetadata,
  metadataIndexKey,
  metadataPairs,
  type MetadataPair,
} from './metadata-index.js';
import {
  decodeFields,
  isControl,
  type CompactedSegment,
  type IterationRecord,
  type SessionState,
  type Status,
} from './session-state.js';

export interface StoredEvent {
  id: string;
  type: string;
  /** Event data as stored (JSON text). */
  data: string;
  revision: number;
  at: number;
}

/** How old an index entry without its session must be before a list drops it (ms): older than any create's write. */
const INDEX_GRACE_MS = 60_000;

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
  /** How long the event log of a session deleted by its TTL keeps its `session.deleted` event (ms; default 60000). */
  deletedLogTtlMs?: number;
}

/** Defaults of the optional StoreOptions (the config's). */
export const EVENT_LOG_MAX_BYTES = 16 * 1024 * 1024;
export const MAX_TURN_BYTES = 4 * 1024 * 1024;

/**
 * The session store: every read and write of session state goes through here. Writes are single Lua scripts over
 * the keys of one session; the guarantees of each are in its JSDoc.
 */
/**
 * How many sessions of a list round to read next (`left` not read yet, `loaded` read, taking `bytes` of the page so
 * far). Without a byte bound, all. With one, two first, then as many as the room left holds at the size seen so far
 * (at least one): a page of 400 kB sessions reads the three it needs (two sent, one over the bound), not the whole
 * round of 100 — each read is a whole meta hash decoded on the event loop (~5 ms of CPU for a 400 kB one). A page
 * of small sessions costs one round trip more than reading them all at once.
 */
function listChunk(left: number, loaded: number, bytes: number, bound?: { maxBytes: number }): number {
  if (!bound) return left;
  if (loaded === 0) return Math.min(left, 2);
  if (bytes === 0) return left;
  const room = Math.max(0, bound.maxBytes - bytes);
  return Math.min(left, Math.max(1, Math.ceil(room / (bytes / loaded))));
}

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
  private readonly storage: StorageQuota;
  /** Tenants of sessions seen by `load` (a session's tenant never changes): a run's commits count its bytes. */
  private readonly tenants = new Map<string, string>();
  /** The tenants' metadata pairs → sessions (metadata-index.ts), for `metadata.<key>` list filters. */
  readonly metadataIndex: MetadataIndex;

  constructor(
    redis: RedisClient,
    readonly options: StoreOptions,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sess');
    this.redis = redis;
    this.runs = new RunQueue(redis, options.tenantMaxActiveRuns ?? 0);
    this.actionsDue = new DueSet(redis, ACTIONS_DUE_KEY);
    this.expiryDue = new DueSet(redis, EXPIRY_DUE_KEY);
    this.spend = new TenantSpend(redis, {
      prices: new PriceTable(options.modelPrices),
      capUsdPerDay: options.tenantMaxCostUsdPerDay ?? 0,
      retentionDays: options.usageRetentionDays ?? 400,
    });
    this.storage = new StorageQuota(redis, options.tenantMaxBytes ?? 0);
    this.metadataIndex = new MetadataIndex(redis);
  }

  private async tenantOf(id: string, known?: string): Promise<string | null> {
    return known ?? this.tenants.get(id) ?? (await this.redis.hget(sessionKeys(id).meta, 'tenant'));
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
    // Bytes added are counted in the session (same script) and then the tenant (see storage-quota.ts).
    let added = addedBytes(ops, guard);
    const owner = added > 0 ? await this.tenantOf(id, tenant) : null;
    if (owner !== null) {
      added = await this.storage.check(owner, ops, guard);
      ops = { ...ops, hincr: { ...ops.hincr, bytes: added } };
    }
    // A change that makes the session `running` registers it in the run queue first: should the store fail between
    // the two writes, a due entry without a running session is dropped by the sweep, whereas a running session
    // without a due entry would never run. (`runs:due` is a global key, so it cannot join the session's script.)
    // Its run slot is taken before both, for the same reason: a slot without a running session is dropped later.
    if (setsRunning(ops)) {
      const t = tenant ?? (await this.redis.hget(k.meta, 'tenant'));
      // Over the tenant's daily dollar cap, no run starts (429 `quota_exceeded`, `cost_usd_per_day`).
      await this.spend.assertUnderCap(t);
      await this.runs.start(t, id);
    }
    // A new action deadline is registered before the write that sets it (an early entry is moved on by the sweep).
    const warnAt = Number(ops.hset?.['act_warn'] ?? ops.queue?.none?.hset?.['act_warn']);
    if (warnAt > 0) await this.actionsDue.add(id, warnAt);
    const tap = this.eventTap?.(id, opsEventTypes(ops), tenant);
    if (tap?.ready) await tap.ready;
    const turnMax = this.options.maxTurnBytes ?? MAX_TURN_BYTES;
    const res = await this.redis
      .sessApply(
        ...this.keyList(k),
        JSON.stringify(ops.queue_push ? { ...guard, turn_max: turnMax } : guard),
        JSON.stringify(ops),
        this.options.eventLogMax,
        channelName(this.redis, eventsChannel(id)),
        NOTICE_MAX_BYTES,
        this.options.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
      )
      .catch((err: unknown) => {
        throw asStoreError(err);
      });
    if (res[0] === 'ERR') {
      const code = String(res[1]);
      const current = String(res[2]);
      if (code === 'fenced') throw new FencedOut(id);
      if (code === 'revision') throw revisionMismatch(Number(current));
      if (code === 'status') throw new InvalidStatus(current);
      if (code === 'exists') throw new SessionExists();
      if (code === 'turn_too_large') {
        throw new InvalidRequest(
          'payload_too_large',
          `The user turn this message joins would be ${current} bytes, more than MAX_TURN_BYTES (${turnMax}).`,
          { limit: turnMax, turn_bytes: Number(current), quota: 'MAX_TURN_BYTES' },
        );
      }
      throw notFound();
    }
    tap?.landed();
    if (owner !== null) await this.storage.add(owner, added);
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
    const h = await this.redis.hgetall(sessionKeys(id).meta).catch((err: unknown) => {
      throw asStoreError(err);
    });
    if (!h['id']) return null;
    const s = decodeFields(h);
    if (this.tenants.size >= 10_000) this.tenants.clear();
    this.tenants.set(id, s.tenant);
    return s;
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
      channelName(this.redis, eventsChannel(id)),
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

  /** Index members sort by creation time then id, so a lexicographic range pages the list exactly. */
  indexMember(createdAt: number, id: string): string {
    return `${String(createdAt).padStart(15, '0')}:${id}`;
  }

  /** Lists the session in its tenant's index, and under each of its metadata pairs (`metadata`). */
  async index(
    tenant: string,
    id: string,
    createdAt: number,
    metadata: Record<string, unknown> = {},
  ): Promise<void> {
    const member = this.indexMember(createdAt, id);
    await Promise.all([
      this.redis.zadd(tenantIndexKey(tenant), 0, member),
      this.metadataIndex.add(tenant, member, metadataPairs(metadata)),
    ]);
  }

  /** How many sessions `tenant` keeps (its index: one ZCARD). */
  countSessions(tenant: string): Promise<number> {
    return this.redis.zcard(tenantIndexKey(tenant));
  }

  async unindex(tenant: string, id: string, createdAt: number): Promise<void> {
    await this.redis.zrem(tenantIndexKey(tenant), this.indexMember(createdAt, id));
  }

  /**
   * The session an index entry stands for, or null: an entry is the session's only when its time is the session's
   * `created_at`. A create indexes before it writes, so for a moment an entry has no session yet, and a create that
   * lost the race for a deterministic id (`session_exists`) has an entry of its own time until it unindexes it.
   */
  private entryOf(member: string, s: SessionState | null): SessionState | null {
    return s && this.indexMember(s.createdAt, s.id) === member ? s : null;
  }

  /**
   * A tenant's sessions, newest first. The cursor is the index member of the last item of the previous page.
   * Entries whose session is gone are dropped from the index on the way (once older than INDEX_GRACE_MS, so the
   * entry of a create in flight stays); a status filter reads at most 20 index
   * pages per call, so one request stays bounded. Metadata filters page the index of the narrowest pair instead
   * (metadata-index.ts), every candidate checked against the session (a stale entry is dropped).
   */
  async list(
    tenant: string,
    opts: {
      limit: number;
      cursor?: string | undefined;
      status?: Status | undefined;
      metadata?: readonly MetadataPair[] | undefined;
    },
    /** A page stops before the item that would take it over `maxBytes` (as `sizeOf` counts); never empty. */
    bound?: { maxBytes: number; sizeOf: (s: SessionState) => number },
  ): Promise<{ items: SessionState[]; next: string | null }> {
    const filters = opts.metadata ?? [];
    // With filters: the index of one pair (`own`), whose members that no longer have it are dropped.
    const own = filters.length ? await this.metadataIndex.narrowest(tenant, filters) : null;
    const key = own ? metadataIndexKey(tenant, own) : tenantIndexKey(tenant);
    if (opts.cursor && !/^\d{15}:ses_[A-Za-z0-9]+$/.test(opts.cursor)) {
      throw new InvalidRequest('invalid_cursor', 'The cursor is not one this service gave.');
    }
    let max = opts.cursor ? `(${opts.cursor}` : '+';
    const items: SessionState[] = [];
    let lastMember: string | null = null;
    let exhausted = false;
    const pageSize = opts.status || filters.length > 1 ? 100 : opts.limit;
    let bytes = 0;
    let full = false;
    for (let round = 0; round < 20 && items.length < opts.limit && !full; round++) {
      const members = await this.redis.zrevrangebylex(key, max, '-', 'LIMIT', 0, pageSize);
      const states: Array<SessionState | null> = [];
      let read = 0;
      for (; read < members.length && items.length < opts.limit; read++) {
        if (read === states.length) {
          const next = members.slice(
            read,
            read + listChunk(members.length - read, states.length, bytes, bound),
          );
          states.push(...(await Promise.all(next.map((m) => this.load(m.slice(16))))));
        }
        const member = members[read]!;
        const s = this.entryOf(member, states[read] ?? null);
        if (
          s &&
          bound &&
          (!opts.status || s.status === opts.status) &&
          matchesMetadata(s.metadata, filters)
        ) {
          bytes += bound.sizeOf(s);
          if (bytes > bound.maxBytes && items.length > 0) {
            full = true;
            break;
          }
        }
        lastMember = member;
        if (!s) {
          if (Number(member.slice(0, 15)) < Date.now() - INDEX_GRACE_MS) await this.redis.zrem(key, member);
        } else if (own && !matchesMetadata(s.metadata, [own])) await this.redis.zrem(key, member);
        else if ((!opts.status || s.status === opts.status) && matchesMetadata(s.metadata, filters))
          items.push(s);
      }
      if (full) break;
      if (members.length < pageSize && read === members.length) {
        exhausted = true;
        break;
      }
      max = `(${lastMember}`;
    }
    // A short page with a cursor means the bounded scan stopped before the end of the index: ask again from there.
    const more = items.length === opts.limit || !exhausted || full;
    return { items, next: more && lastMember ? lastMember : null };
  }

  /**
   * Deletes every key of the session (its client tokens too); its event log keeps a `session.deleted` event (`data`: `{"id"}` and what
   * `reason` adds) for `ttlMs`. With `revision`, only while the session is still at it: false, nothing written, when
   * a write came first (a swept delete never races a new message). Then the tenant index entry, the due entries and
   * what the `destroyHooks` drop.
   */
  async destroy(
    id: string,
    tenant: string,
    createdAt: number,
    opts: { ttlMs?: number; revision?: number; reason?: string } = {},
  ): Promise<boolean> {
    const k = sessionKeys(id);
    const tap = this.eventTap?.(id, ['session.deleted'], tenant);
    if (tap?.ready) await tap.ready;
    const bytes = Number((await this.redis.hget(k.meta, 'bytes')) ?? 0);
    let done: number;
    try {
      done = await this.redis.sessDestroy(
        ...this.keyList(k),
        k.tokens,
        JSON.stringify(opts.reason ? { id, reason: opts.reason } : { id }),
        opts.ttlMs ?? 60_000,
        channelName(this.redis, eventsChannel(id)),
        opts.revision === undefined ? '' : String(opts.revision),
      );
    } catch (err) {
      // Redis full (noeviction): a delete frees memory, so it must work then too. Plain UNLINKs are never refused
      // for memory (the script is, when its first write would add); live readers then learn of it by the 404.
      // (A swept delete, guarded by a revision, is not forced: it is tried again by the next sweep.)
      if (!isOutOfMemory(err) || opts.revision !== undefined) throw err;
      done = (await this.redis.unlink(...this.keyList(k), k.tokens)) > 0 ? 1 : 0;
    }
    if (done === -1) return false;
    if (done === 1) tap?.landed();
    this.tenants.delete(id);
    await Promise.all([
      this.unindex(tenant, id, createdAt),
      this.runs.end(id, tenant, true),
      done === 1
        ? this.storage.add(tenant, -bytes).catch((err: unknown) => {
            if (!isOutOfMemory(err)) throw err; // still full after the delete: the count stays high (an upper bound)
          })
        : null,
      this.redis.zrem(ACTIONS_DUE_KEY, id),
      this.redis.zrem(EXPIRY_DUE_KEY, id),
      ...this.destroyHooks.map((hook) => hook(id, tenant)),
    ]);
    return done === 1;
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
