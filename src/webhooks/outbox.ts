import type { RedisClient } from '../store/lua-commands.js';
import { sessionKeys } from '../store/keys.js';
import { DUE_KEY, fanoutLease, fanoutState, MARKS_KEY, webhookKeys } from './keys.js';

/**
 * The delivery side of the webhooks' store (src/webhooks/store.ts, which builds it as `store.outbox`): sessions
 * marked as having events to fan out, each session's fan-out cursor, each webhook's outbox and the due set. Every
 * method is one command or one script (src/webhooks/lua/), or says in which order its steps run; each says what it
 * guarantees atomically.
 */

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

/** An endpoint's outbox bounds: messages waiting (WEBHOOK_MAX_PENDING) and their bytes (WEBHOOK_MAX_PENDING_BYTES). */
export interface PendingBounds {
  count: number;
  bytes: number;
}

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

/** `[member, score]` pairs of a ZRANGEBYSCORE … WITHSCORES reply. */
function scored(flat: string[]): Array<[string, number]> {
  const out: Array<[string, number]> = [];
  for (let i = 0; i + 1 < flat.length; i += 2) out.push([flat[i]!, Number(flat[i + 1])]);
  return out;
}

export class WebhookOutbox {
  /** `redis` has the webhooks' scripts defined (WebhookStore's constructor does it). */
  constructor(private readonly redis: RedisClient) {}

  // ---- marks (src/webhooks/tap.ts) ------------------------------------------------------------------------

  /** Marks a session as having events to fan out; the score only grows. One ZADD. */
  mark(sessionId: string, atMs: number): Promise<number> {
    return this.redis.zadd(MARKS_KEY, 'GT', atMs, sessionId);
  }

  /** Marks whose newest write is older than `beforeMs`, with their scores. */
  async staleMarks(beforeMs: number, limit: number): Promise<Array<[string, number]>> {
    return scored(
      await this.redis.zrangebyscore(MARKS_KEY, '-inf', beforeMs, 'WITHSCORES', 'LIMIT', 0, limit),
    );
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
      `s:{${sessionId}}:e`,
      owner,
      cursor,
      tenant,
      FANOUT_STATE_TTL_MS,
      release ? '1' : '0',
    );
    return ok === 1;
  }

  /**
   * The tenant of a session (or a schedule: the same key layout), from its meta hash or, once it is deleted, the
   * tenant its delete left beside the log it keeps (`s:{id}:g`, destroy-11.lua) or its fan-out state. The state has
   * a tenant only once a fan-out of the log ran: a webhook listening only for the delete (`session.deleted`) marks
   * nothing before it, so the sweep of the mark of a replica killed right after the delete found no tenant, and
   * dropped the event.
   */
  async sessionTenant(sessionId: string): Promise<string | null> {
    const [meta, gone, state] = await Promise.all([
      this.redis.hget(sessionKeys(sessionId).meta, 'tenant'),
      this.redis.get(sessionKeys(sessionId).gone),
      this.redis.hget(fanoutState(sessionId), 't'),
    ]);
    return meta || gone || state || null;
  }

  // ---- outbox ---------------------------------------------------------------------------------------------

  /**
   * Puts messages in the webhook's outbox, each at most once while pending or lately settled, within
   * `maxPending` messages and bytes (atomic, one script; past either a message is dropped); then schedules the webhook now in the due set. Null when the webhook is
   * gone or disabled.
   */
  async enqueue(
    webhookId: string,
    messages: Array<[string, string]>,
    maxPending: PendingBounds,
  ): Promise<{ added: number; dropped: number } | null> {
    const k = webhookKeys(webhookId);
    const args: Array<string | number> = [
      k.meta,
      k.queue,
      k.payloads,
      k.attempts,
      k.settled,
      maxPending.count,
      maxPending.bytes,
    ];
    for (const [id, body] of messages) args.push(id, body);
    const [added, dropped, waiting] = await this.redis.whEnqueue(...args);
    if (added < 0) return null;
    // After the outbox write, so a claim that saw no message yet is followed by a fresh score (see due-set-1.lua);
    // Redis's now to the microsecond makes the score differ from one read in the same millisecond.
    if (added > 0) await this.redis.whDueNow(DUE_KEY, webhookId, 'fresh');
    // A replay (after a crash) that found its messages pending: the process that added them may have died before
    // its write above, and nothing else would schedule the endpoint. NX: an endpoint scheduled already (maybe at a
    // retry's backoff) keeps its time.
    else if (waiting > 0) await this.redis.whDueNow(DUE_KEY, webhookId, 'NX');
    return { added, dropped };
  }

  /**
   * Endpoints with deliveries due by Redis's now (past the `offset` first), with the scores read (for
   * `reschedule`), and that now (due-read-1.lua).
   */
  async due(limit: number, offset = 0): Promise<{ now: number; due: Array<[string, number]> }> {
    const [now, ...rows] = await this.redis.whDueRead(DUE_KEY, offset, limit);
    return { now: Number(now), due: scored(rows) };
  }

  /** Claims due messages within the endpoint's concurrency limit (atomic; see claim-5.lua). */
  /** The endpoint's tenant, or null when it is gone. */
  tenantOf(webhookId: string): Promise<string | null> {
    return this.redis.hget(webhookKeys(webhookId).meta, 'tenant');
  }

  /** `max`: the most messages this call takes (the caller's room), within the endpoint's concurrency. */
  async claim(webhookId: string, limits: OutboxLimits, max: number): Promise<ClaimResult> {
    const k = webhookKeys(webhookId);
    const res = await this.redis.whClaim(
      k.meta,
      k.queue,
      k.payloads,
      k.attempts,
      k.inflight,
      limits.leaseMs,
      limits.concurrency,
      max,
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

  /** Brings the endpoint's due time forward to `next` (never later; a time a claim or settle answered). */
  async nudge(webhookId: string, next: number): Promise<void> {
    if (next >= 0) await this.redis.zadd(DUE_KEY, 'LT', next, webhookId);
  }

  /** Brings the endpoint's due time forward to Redis's now (never later). */
  async nudgeNow(webhookId: string): Promise<void> {
    await this.redis.whDueNow(DUE_KEY, webhookId, 'LT');
  }

  /** Records an attempt's outcome atomically (see settle-7.lua). */
  async settle(
    webhookId: string,
    msgId: string,
    ok: boolean,
    retryDelayMs: number,
    entry: DeliveryLogEntry,
    limits: OutboxLimits,
  ): Promise<{ outcome: Outcome; next: number; now: number }> {
    const k = webhookKeys(webhookId);
    const [outcome, next, now] = await this.redis.whSettle(
      k.meta,
      k.queue,
      k.payloads,
      k.attempts,
      k.inflight,
      k.log,
      k.settled,
      msgId,
      ok ? '1' : '0',
      retryDelayMs,
      limits.retryForMs,
      limits.disableAfterMs,
      JSON.stringify(entry),
      limits.logMax,
      SETTLED_KEEP_MS,
      SETTLED_MAX,
    );
    return { outcome, next: Number(next), now: Number(now) };
  }

  /** The newest `limit` entries of the deliveries log. One LRANGE. */
  async deliveries(id: string, limit: number): Promise<DeliveryLogEntry[]> {
    const raw = await this.redis.lrange(webhookKeys(id).log, 0, limit - 1);
    // Written by `settle` (JSON of a DeliveryLogEntry).
    return raw.map((r): DeliveryLogEntry => JSON.parse(r));
  }
}
