import type { PendingBounds } from './outbox.js';
import type { FastifyBaseLogger as Logger } from 'fastify';
import { envelope } from '../events/envelope.js';
import { parseStreamEntry } from '../store/store.js';
import type { IndexEntry } from './keys.js';
import type { WebhookStore } from './store.js';

/**
 * The fan-out: a session's new events, read from its log after the session's webhook cursor, become messages in
 * the outboxes of the tenant's webhooks that listen for their types (and existed when the event was written).
 * Under a lease in the session's slot; the cursor moves only after the outboxes took the messages, so a crash
 * replays the read and the outboxes drop what they already hold (enqueue-5.lua). The message id, the same on
 * every attempt (`webhook-id`), is `msg_<session>_<event id>`.
 */

const BATCH = 200;
const LEASE_MS = 15_000;
const BUSY_RETRY_MS = 200;
/** Sweeps of different sessions at once in this process. */
const PARALLEL = 8;
/**
 * Pages one turn of a queued session reads before it goes to the back of its tenant's queue: a session whose log
 * grows as fast as it is read (a fast stream, a webhook on `stream.event`) never reaches the end, and must not hold
 * a slot, or its tenant's other sessions and other tenants' sessions would wait for the mark's sweep.
 */
const PAGES_PER_TURN = 2;

/** How far a sweep got: the log's end, a page bound with more to read, or the lease held by another process. */
/** `more`: the page bound stopped it, with the session's tenant as the sweep read it. */
type SweepEnd = 'done' | 'busy' | { more: string };

export interface FanoutOptions {
  store: WebhookStore;
  owner: string;
  maxPending: PendingBounds;
  log: Logger;
  tenantOf: (sessionId: string) => string | undefined;
  /** Told of endpoints that got messages. */
  enqueued: (webhookId: string) => void;
  /** Retries of a busy session's kick stop after this long (the final sweep of its mark takes over). */
  graceMs: number;
}

export const messageId = (sessionId: string, eventId: string) => `msg_${sessionId}_${eventId}`;

/**
 * The sessions waiting for a sweep, one FIFO per tenant, the tenants served round robin: each turn takes the
 * oldest session of the tenant at the front and moves the tenant to the back, so however many busy sessions one
 * tenant has, another tenant's session waits for at most one turn of each tenant ahead of it.
 */
class FairQueue {
  /** Tenant → (session → when its first unswept kick came), in turn order; no tenant has an empty queue. */
  private readonly byTenant = new Map<string, Map<string, number>>();
  private readonly tenantOfQueued = new Map<string, string>();

  get size(): number {
    return this.tenantOfQueued.size;
  }

  has(sessionId: string): boolean {
    return this.tenantOfQueued.has(sessionId);
  }

  push(sessionId: string, tenant: string, firstAt: number): void {
    if (this.tenantOfQueued.has(sessionId)) return;
    this.tenantOfQueued.set(sessionId, tenant);
    let q = this.byTenant.get(tenant);
    if (!q) this.byTenant.set(tenant, (q = new Map()));
    q.set(sessionId, firstAt);
  }

  shift(): [string, number] | undefined {
    const first = this.byTenant.entries().next();
    if (first.done) return undefined;
    const [tenant, q] = first.value;
    const [sessionId, firstAt] = q.entries().next().value!;
    q.delete(sessionId);
    this.tenantOfQueued.delete(sessionId);
    // To the back of the turn order (a Map iterates in insertion order).
    this.byTenant.delete(tenant);
    if (q.size > 0) this.byTenant.set(tenant, q);
    return [sessionId, firstAt];
  }

  clear(): void {
    this.byTenant.clear();
    this.tenantOfQueued.clear();
  }
}

export class Fanout {
  private readonly waiting = new FairQueue();
  private running = 0;
  private readonly active = new Set<string>();
  private readonly again = new Set<string>();
  private closed = false;
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(private readonly opts: FanoutOptions) {}

  /** Sweeps the session soon (a write of events to it landed in this process); `tenant` when the caller knows it. */
  kick(sessionId: string, firstAt = Date.now(), tenant?: string): void {
    if (this.closed) return;
    if (this.active.has(sessionId)) {
      this.again.add(sessionId);
      return;
    }
    // A session of a tenant not known yet queues with the other unknown ones (the sweep reads the tenant).
    this.waiting.push(sessionId, tenant ?? this.opts.tenantOf(sessionId) ?? '', firstAt);
    this.pump();
  }

  private pump(): void {
    while (this.running < PARALLEL && this.waiting.size > 0) {
      const [sessionId, firstAt] = this.waiting.shift()!;
      this.running++;
      this.active.add(sessionId);
      let more: string | undefined;
      void this.sweepSome(sessionId, PAGES_PER_TURN)
        .then(
          (end) => {
            if (typeof end === 'object') more = end.more;
            if (end === 'busy' && Date.now() - firstAt < this.opts.graceMs) this.later(sessionId, firstAt);
          },
          (err: unknown) => {
            this.opts.log.warn({ err, session: sessionId }, 'webhook fan-out failed; retrying');
            if (Date.now() - firstAt < this.opts.graceMs) this.later(sessionId, firstAt);
          },
        )
        .finally(() => {
          this.running--;
          this.active.delete(sessionId);
          // More to read: back of the queue (its tenant's next turn, the tenant as the sweep read it), as a fresh
          // kick — it made progress.
          if (this.again.delete(sessionId) || more !== undefined) this.kick(sessionId, Date.now(), more);
          this.pump();
        });
    }
  }

  private later(sessionId: string, firstAt: number): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      this.kick(sessionId, firstAt);
    }, BUSY_RETRY_MS);
    this.timers.add(t);
  }

  /**
   * Reads the session's events after its cursor to the end, enqueueing them; true when it reached the end, false
   * when another process holds the session's fan-out lease. Throws when Redis fails (the cursor did not move past
   * anything not enqueued). The sweep of a stale mark (dispatcher.ts): no write came for the grace, the end is
   * near.
   */
  async sweep(sessionId: string): Promise<boolean> {
    return (await this.sweepSome(sessionId, Infinity)) === 'done';
  }

  /**
   * Reads up to `pages` pages of the session's events after its cursor, enqueueing them, each page's cursor moved
   * only after its messages are in the outboxes (so the events of a session reach each outbox in log order, turn
   * after turn). Throws when Redis fails (the cursor did not move past anything not enqueued). Stopping at the page
   * bound releases the lease: the next turn takes it again, or another process does and goes on from the cursor.
   */
  private async sweepSome(sessionId: string, pages: number): Promise<SweepEnd> {
    const { store, owner } = this.opts;
    for (let page = 1; ; page++) {
      const read = await store.outbox.fanoutBegin(sessionId, owner, LEASE_MS, BATCH);
      if (!read) return 'busy';
      const tenant =
        read.tenant || this.opts.tenantOf(sessionId) || (await store.outbox.sessionTenant(sessionId)) || '';
      const last = read.rows.at(-1)?.[0];
      if (!last) {
        await store.outbox.fanoutEnd(sessionId, owner, read.cursor, tenant, true);
        return 'done';
      }
      if (!tenant) this.opts.log.warn({ session: sessionId }, 'webhook fan-out: session of no known tenant');
      // Read fresh, not from the interest cache: a webhook created a moment ago on another replica counts.
      const hooks = tenant ? await store.index(tenant) : new Map<string, IndexEntry>();
      const perHook = new Map<string, Array<[string, string]>>();
      for (const row of read.rows) {
        const ev = parseStreamEntry(row);
        const atMs = Number(ev.id.slice(0, ev.id.indexOf('-')));
        let body: string | undefined;
        for (const [id, h] of hooks) {
          if (h.disabled || !h.events.includes(ev.type) || atMs < h.created_at) continue;
          body ??= JSON.stringify(envelope(sessionId, ev));
          let list = perHook.get(id);
          if (!list) perHook.set(id, (list = []));
          list.push([messageId(sessionId, ev.id), body]);
        }
      }
      await Promise.all(
        [...perHook].map(async ([id, msgs]) => {
          const r = await store.outbox.enqueue(id, msgs, this.opts.maxPending);
          if (r?.dropped)
            this.opts.log.warn(
              { webhook: id, tenant, dropped: r.dropped },
              'webhook outbox full; events dropped',
            );
          if (r?.added) this.opts.enqueued(id);
        }),
      );
      const full = read.rows.length >= BATCH;
      const stop = !full || page >= pages;
      if (!(await store.outbox.fanoutEnd(sessionId, owner, last, tenant, stop))) return 'busy';
      if (!full) return 'done';
      if (stop) return { more: tenant };
    }
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.waiting.clear();
  }
}
