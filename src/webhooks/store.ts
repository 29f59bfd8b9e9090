import type { Cluster, Redis } from 'ioredis';
import { AppError, notFound } from '../errors.js';
import { defineLuaCommands } from '../store/lua-commands.js';

/**
 * The webhooks' door to Redis, in one file (over 400 lines) because it is one class: every key, command and script of
 * the webhooks is here, next to the others it must agree with. Keys (hash tags keep each script on one slot of a Redis Cluster):
 *
 * - `wh:{W}` HASH — webhook W: id, tenant, url, events (JSON), description, secret (sealed), created_at,
 *   updated_at, revision, disabled ('0'|'1'), failing_since (ms), delivered_at (ms of the last 2xx).
 * - `wh:{W}:q` ZSET msg → due ms; `wh:{W}:m` HASH msg → body; `wh:{W}:a` HASH msg → "attempts:first ms";
 *   `wh:{W}:f` ZSET msg → lease expiry (in flight); `wh:{W}:d` LIST deliveries log; `wh:{W}:s` ZSET msg → ms
 *   (settled lately: a replayed fan-out does not enqueue them again). Together: W's outbox.
 * - `wht:{T}` HASH W → `{"events","disabled","created_at"}`: tenant T's webhooks (what a fan-out needs).
 * - `wh:tenants` SET of tenants that have webhooks; `wh:due` ZSET W → next due ms; `wh:marks` ZSET session → ms
 *   of its newest mark (a session with events maybe not yet fanned out: src/webhooks/tap.ts).
 * - `s:{S}:wh` HASH (c = fan-out cursor, t = tenant) and `s:{S}:whl` (fan-out lease): in the session's slot.
 *
 * Every method is one command or one script; each says what it guarantees atomically.
 */

export type RedisClient = Redis | Cluster;

export const webhookKeys = (id: string) => ({
  meta: `wh:{${id}}`,
  queue: `wh:{${id}}:q`,
  payloads: `wh:{${id}}:m`,
  attempts: `wh:{${id}}:a`,
  inflight: `wh:{${id}}:f`,
  log: `wh:{${id}}:d`,
  settled: `wh:{${id}}:s`,
});
export const tenantWebhooksKey = (tenant: string) => `wht:{${tenant}}`;
export const TENANTS_KEY = 'wh:tenants';
export const DUE_KEY = 'wh:due';
export const MARKS_KEY = 'wh:marks';
/** Pub/sub: a tenant's set of webhooks changed (message: the tenant). */
const CHANGED_CHANNEL = 'wh:changed';
const fanoutState = (sessionId: string) => `s:{${sessionId}}:wh`;
const fanoutLease = (sessionId: string) => `s:{${sessionId}}:whl`;

export interface WebhookRecord {
  id: string;
  tenant: string;
  url: string;
  events: string[];
  description: string | null;
  /** As stored (sealed when a key is configured). */
  secret: string;
  createdAt: number;
  updatedAt: number;
  revision: number;
  disabled: boolean;
  failingSince: number | null;
}

/** What a fan-out needs to know of a tenant's webhook (kept in the tenant's index). */
export interface IndexEntry {
  events: string[];
  disabled: boolean;
  created_at: number;
}

export interface Claimed {
  msgId: string;
  attempt: number;
  firstAttemptAt: number;
  body: string;
}

export type ClaimResult =
  | { kind: 'gone' | 'disabled' }
  | { kind: 'ok'; next: number; url: string; secret: string; tenant: string; messages: Claimed[] };

export type Outcome = 'delivered' | 'retrying' | 'gave_up' | 'disabled' | 'stale' | 'gone';

export interface DeliveryLogEntry {
  message_id: string;
  event_id: string | null;
  event_type: string;
  session_id: string | null;
  attempt: number;
  status_code: number | null;
  error: string | null;
  duration_ms: number;
  at: string;
  outcome?: Outcome;
}

/** The event types of a webhook hash's `events` field (a JSON array of strings, as `create` writes it). */
function parseEvents(raw: string | undefined): string[] {
  const parsed: unknown = JSON.parse(raw ?? '[]');
  return Array.isArray(parsed) ? parsed.map(String) : [];
}

function decode(h: Record<string, string>): WebhookRecord {
  return {
    id: h['id']!,
    tenant: h['tenant']!,
    url: h['url']!,
    events: parseEvents(h['events']),
    description: h['description'] ? h['description'] : null,
    secret: h['secret'] ?? '',
    createdAt: Number(h['created_at'] ?? 0),
    updatedAt: Number(h['updated_at'] ?? 0),
    revision: Number(h['revision'] ?? 1),
    disabled: h['disabled'] === '1',
    failingSince: h['failing_since'] ? Number(h['failing_since']) : null,
  };
}

export const indexEntry = (w: WebhookRecord): IndexEntry => ({
  events: w.events,
  disabled: w.disabled,
  created_at: w.createdAt,
});

export interface OutboxLimits {
  maxPending: number;
  leaseMs: number;
  concurrency: number;
  retryForMs: number;
  disableAfterMs: number;
  logMax: number;
}

/** How long settled message ids are remembered against a replayed fan-out, and how many at most. */
const SETTLED_KEEP_MS = 3_600_000;
const SETTLED_MAX = 20_000;
/** A session's fan-out state outlives its log (deleted sessions keep their log for a minute). */
const FANOUT_STATE_TTL_MS = 7 * 86_400_000;

export class WebhookStore {
  constructor(readonly redis: RedisClient) {
    // lua/update.lua deletes every key of the webhook: its key count varies with the call (no `-<n>` suffix).
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'wh');
  }

  /**
   * Follows the changes any replica publishes (a tenant's set of webhooks changed) on `sub`, a connection in
   * subscriber mode shared with other channels: `onTenant(tenant)` for each change, `onReconnect()` each time the
   * connection is ready again (changes published while it was away are lost). Returns what stops following.
   */
  async followChanges(
    sub: RedisClient,
    onTenant: (tenant: string) => void,
    onReconnect: () => void,
  ): Promise<() => void> {
    const onMessage = (channel: string, tenant: string) => {
      if (channel === CHANGED_CHANNEL) onTenant(tenant);
    };
    sub.on('message', onMessage);
    sub.on('ready', onReconnect);
    await sub.subscribe(CHANGED_CHANNEL);
    return () => {
      sub.off('message', onMessage);
      sub.off('ready', onReconnect);
    };
  }

  // ---- webhooks ------------------------------------------------------------------------------------------

  /**
   * Lists the webhook in its tenant's index (refused with 429 `quota_exceeded` at `max`, atomically with the count)
   * and then writes it (one HSET). A crash between the two leaves an index entry without a webhook, which listing
   * skips and the fan-out ignores.
   */
  async create(w: WebhookRecord, max: number): Promise<void> {
    await this.redis.sadd(TENANTS_KEY, w.tenant);
    const ok = await this.redis.whIndexAdd(
      tenantWebhooksKey(w.tenant),
      w.id,
      JSON.stringify(indexEntry(w)),
      max,
    );
    if (ok !== 1)
      throw new AppError(429, 'quota_exceeded', `A tenant has at most ${max} webhooks.`, {
        quota: 'WEBHOOK_MAX_PER_TENANT',
        limit: max,
      });
    await this.redis.hset(webhookKeys(w.id).meta, {
      id: w.id,
      tenant: w.tenant,
      url: w.url,
      events: JSON.stringify(w.events),
      description: w.description ?? '',
      secret: w.secret,
      created_at: String(w.createdAt),
      updated_at: String(w.updatedAt),
      revision: String(w.revision),
      disabled: w.disabled ? '1' : '0',
    });
    await this.changed(w.tenant);
  }

  /** The webhook if it exists and is `tenant`'s; 404 `webhook_not_found` otherwise. One HGETALL. */
  async get(tenant: string, id: string): Promise<WebhookRecord> {
    const h = await this.redis.hgetall(webhookKeys(id).meta);
    if (!h['id'] || h['tenant'] !== tenant) throw notFound('webhook');
    return decode(h);
  }

  /** The tenant's webhooks, oldest first; index entries without a webhook are dropped on the way. */
  async list(tenant: string): Promise<WebhookRecord[]> {
    const ids = await this.redis.hkeys(tenantWebhooksKey(tenant));
    const all = await Promise.all(ids.map((id) => this.redis.hgetall(webhookKeys(id).meta)));
    const out: WebhookRecord[] = [];
    for (const [i, h] of all.entries()) {
      if (h['id'] && h['tenant'] === tenant) out.push(decode(h));
      else await this.redis.hdel(tenantWebhooksKey(tenant), ids[i]!);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id));
  }

  /** The index of a tenant (fan-out, interest cache): one HGETALL. */
  async index(tenant: string): Promise<Map<string, IndexEntry>> {
    const h = await this.redis.hgetall(tenantWebhooksKey(tenant));
    const out = new Map<string, IndexEntry>();
    for (const [id, raw] of Object.entries(h)) {
      try {
        const entry: IndexEntry = JSON.parse(raw);
        out.set(id, entry);
      } catch {
        /* a foreign or damaged entry is not a webhook */
      }
    }
    return out;
  }

  tenants(): Promise<string[]> {
    return this.redis.smembers(TENANTS_KEY);
  }

  /**
   * Changes fields of the webhook, atomically guarded by tenant and `ifRevision` (404 / 412), bumping its revision;
   * then its index entry is rewritten and the change published.
   */
  async patch(
    tenant: string,
    id: string,
    fields: Record<string, string>,
    ifRevision: number | undefined,
  ): Promise<WebhookRecord> {
    const k = webhookKeys(id);
    const res = await this.redis.whUpdate(
      1,
      k.meta,
      tenant,
      ifRevision === undefined ? '' : String(ifRevision),
      'patch',
      JSON.stringify(fields),
    );
    this.check(res);
    const w = await this.get(tenant, id);
    await this.reindex(w);
    return w;
  }

  /** Deletes the webhook and its whole outbox in one script (guarded like `patch`), then its index entry. */
  async remove(tenant: string, id: string, ifRevision: number | undefined): Promise<void> {
    const k = webhookKeys(id);
    const keys = [k.meta, k.queue, k.payloads, k.attempts, k.inflight, k.log, k.settled];
    const res = await this.redis.whUpdate(
      keys.length,
      ...keys,
      tenant,
      ifRevision === undefined ? '' : String(ifRevision),
      'delete',
      '{}',
    );
    this.check(res);
    await this.redis.hdel(tenantWebhooksKey(tenant), id);
    await this.redis.zrem(DUE_KEY, id);
    await this.changed(tenant);
  }

  private check(res: [string, string | number, string?]): void {
    if (res[0] !== 'ERR') return;
    if (res[1] === 'revision') {
      const cur = Number(res[2]);
      throw new AppError(412, 'revision_mismatch', `The webhook is at revision ${cur}.`, { revision: cur });
    }
    throw notFound('webhook');
  }

  /**
   * Rewrites the webhook's index entry from its record (after a patch or when it was disabled) and publishes. The
   * hash and the index live on different slots, so a writer holding an older record (the dispatcher disabling the
   * webhook while a PATCH enables it) could write last and leave the index stale for good. So each writer reads the
   * hash again after its write and writes again until the revision it wrote is the one stored: every change bumps
   * the revision and reindexes after it, so the last write is of the last revision. A deleted webhook's entry is
   * dropped (its `remove` may have run before this write).
   */
  async reindex(w: WebhookRecord): Promise<void> {
    const index = tenantWebhooksKey(w.tenant);
    let cur = w;
    for (let round = 0; round < 10; round++) {
      await this.redis.hset(index, cur.id, JSON.stringify(indexEntry(cur)));
      const stored = await this.load(cur.id);
      if (!stored) {
        await this.redis.hdel(index, cur.id);
        break;
      }
      if (stored.revision === cur.revision) break;
      cur = stored;
    }
    await this.changed(w.tenant);
  }

  async changed(tenant: string): Promise<void> {
    await this.redis.publish(CHANGED_CHANNEL, tenant);
  }

  /** The newest `limit` entries of the deliveries log. One LRANGE. */
  async deliveries(id: string, limit: number): Promise<DeliveryLogEntry[]> {
    const raw = await this.redis.lrange(webhookKeys(id).log, 0, limit - 1);
    // Written by `settle` (JSON of a DeliveryLogEntry).
    return raw.map((r): DeliveryLogEntry => JSON.parse(r));
  }

  // ---- marks (src/webhooks/tap.ts) ------------------------------------------------------------------------

  /** Marks a session as having events to fan out; the score only grows. One ZADD. */
  mark(sessionId: string, atMs: number): Promise<number> {
    return this.redis.zadd(MARKS_KEY, 'GT', atMs, sessionId);
  }

  /** Marks whose newest write is older than `beforeMs`, with their scores. */
  async staleMarks(beforeMs: number, limit: number): Promise<Array<[string, number]>> {
    const flat = await this.redis.zrangebyscore(MARKS_KEY, '-inf', beforeMs, 'WITHSCORES', 'LIMIT', 0, limit);
    const out: Array<[string, number]> = [];
    for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, Number(flat[i + 1])]);
    return out;
  }

  /** Drops the mark if its score is still `score` and at most `maxScore` (atomically). */
  async markDone(sessionId: string, score: number, maxScore: number): Promise<boolean> {
    return (await this.redis.whMarkDone(MARKS_KEY, sessionId, score, maxScore)) === 1;
  }

  // ---- fan-out (src/webhooks/fanout.ts) -------------------------------------------------------------------

  /**
   * Takes (or renews) the session's fan-out lease and reads up to `count` events after its cursor, atomically.
   * Null when another process holds the lease.
   */
  async fanoutBegin(
    sessionId: string,
    owner: string,
    leaseMs: number,
    count: number,
  ): Promise<{ cursor: string; tenant: string; rows: Array<[string, string[]]> } | null> {
    const res = await this.redis.whFanoutBegin(
      `s:{${sessionId}}:e`,
      fanoutState(sessionId),
      fanoutLease(sessionId),
      owner,
      leaseMs,
      count,
    );
    if (res[0] !== 'ok') return null;
    return {
      cursor: String(res[1]),
      tenant: String(res[2] ?? ''),
      rows: res[3],
    };
  }

  /** Moves the cursor (and records the tenant) if the lease is still ours; optionally releases it. Atomic. */
  async fanoutEnd(
    sessionId: string,
    owner: string,
    cursor: string,
    tenant: string,
    release: boolean,
  ): Promise<boolean> {
    const ok = await this.redis.whFanoutEnd(
      fanoutState(sessionId),
      fanoutLease(sessionId),
      owner,
      cursor,
      tenant,
      FANOUT_STATE_TTL_MS,
      release ? '1' : '0',
    );
    return ok === 1;
  }

  /** The tenant of a session, from its meta hash or (deleted sessions) its fan-out state. */
  async sessionTenant(sessionId: string): Promise<string | null> {
    const [meta, state] = await Promise.all([
      this.redis.hget(`s:{${sessionId}}`, 'tenant'),
      this.redis.hget(fanoutState(sessionId), 't'),
    ]);
    return meta || state || null;
  }

  // ---- outbox ---------------------------------------------------------------------------------------------

  /**
   * Puts messages in the webhook's outbox, each at most once while pending or lately settled, within
   * `maxPending` (atomic, one script); then schedules the webhook now in the due set. Null when the webhook is
   * gone or disabled.
   */
  async enqueue(
    webhookId: string,
    messages: Array<[string, string]>,
    now: number,
    maxPending: number,
  ): Promise<{ added: number; dropped: number } | null> {
    const k = webhookKeys(webhookId);
    const args: Array<string | number> = [
      k.meta,
      k.queue,
      k.payloads,
      k.attempts,
      k.settled,
      now,
      maxPending,
    ];
    for (const [id, body] of messages) args.push(id, body);
    const [added, dropped] = await this.redis.whEnqueue(...args);
    if (added < 0) return null;
    // After the outbox write, so a claim that saw no message yet is followed by a fresh score (see due-set-1.lua);
    // a fraction makes the score differ from one read in the same millisecond.
    if (added > 0) await this.redis.zadd(DUE_KEY, now + Math.random() * 0.999, webhookId);
    return { added, dropped };
  }

  /** Endpoints with deliveries due by `now`, with the scores read (for `reschedule`). */
  async due(now: number, limit: number): Promise<Array<[string, number]>> {
    const flat = await this.redis.zrangebyscore(DUE_KEY, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit);
    const out: Array<[string, number]> = [];
    for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, Number(flat[i + 1])]);
    return out;
  }

  /** Claims due messages within the endpoint's concurrency limit (atomic; see claim-5.lua). */
  async claim(webhookId: string, now: number, limits: OutboxLimits): Promise<ClaimResult> {
    const k = webhookKeys(webhookId);
    const res = await this.redis.whClaim(
      k.meta,
      k.queue,
      k.payloads,
      k.attempts,
      k.inflight,
      now,
      limits.leaseMs,
      limits.concurrency,
    );
    if (res[0] === 'gone' || res[0] === 'disabled') return { kind: res[0] };
    const messages: Claimed[] = [];
    for (let i = 5; i + 3 < res.length; i += 4) {
      messages.push({
        msgId: String(res[i]),
        attempt: Number(res[i + 1]),
        firstAttemptAt: Number(res[i + 2]),
        body: String(res[i + 3]),
      });
    }
    return {
      kind: 'ok',
      next: Number(res[1]),
      url: String(res[2]),
      secret: String(res[3]),
      tenant: String(res[4]),
      messages,
    };
  }

  /** Sets the endpoint's due time to `next` (-1 removes it) unless its score changed since it was read. */
  async reschedule(webhookId: string, seenScore: number, next: number): Promise<void> {
    await this.redis.whDueSet(DUE_KEY, webhookId, seenScore, next);
  }

  /** Brings the endpoint's due time forward to `next` (never later). */
  async nudge(webhookId: string, next: number): Promise<void> {
    if (next >= 0) await this.redis.zadd(DUE_KEY, 'LT', next, webhookId);
  }

  /** Records an attempt's outcome atomically (see settle-7.lua). */
  async settle(
    webhookId: string,
    msgId: string,
    ok: boolean,
    now: number,
    retryDelayMs: number,
    entry: DeliveryLogEntry,
    limits: OutboxLimits,
  ): Promise<{ outcome: Outcome; next: number }> {
    const k = webhookKeys(webhookId);
    const [outcome, next] = await this.redis.whSettle(
      k.meta,
      k.queue,
      k.payloads,
      k.attempts,
      k.inflight,
      k.log,
      k.settled,
      msgId,
      ok ? '1' : '0',
      now,
      retryDelayMs,
      limits.retryForMs,
      limits.disableAfterMs,
      JSON.stringify(entry),
      limits.logMax,
      SETTLED_KEEP_MS,
      SETTLED_MAX,
    );
    return { outcome, next: Number(next) };
  }

  /** The webhook as stored, whoever its tenant (the dispatcher). */
  async load(id: string): Promise<WebhookRecord | null> {
    const h = await this.redis.hgetall(webhookKeys(id).meta);
    return h['id'] ? decode(h) : null;
  }
}
