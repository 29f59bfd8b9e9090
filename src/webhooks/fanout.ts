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

export class Fanout {
  private readonly waiting = new Map<string, number>();
  private running = 0;
  private readonly active = new Set<string>();
  private readonly again = new Set<string>();
  private closed = false;
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(private readonly opts: FanoutOptions) {}

  /** Sweeps the session soon (a write of events to it landed in this process). */
  kick(sessionId: string, firstAt = Date.now()): void {
    if (this.closed) return;
    if (this.active.has(sessionId)) {
      this.again.add(sessionId);
      return;
    }
    if (!this.waiting.has(sessionId)) this.waiting.set(sessionId, firstAt);
    this.pump();
  }

  private pump(): void {
    while (this.running < PARALLEL && this.waiting.size > 0) {
      const [sessionId, firstAt] = this.waiting.entries().next().value!;
      this.waiting.delete(sessionId);
      this.running++;
      this.active.add(sessionId);
      void this.sweep(sessionId)
        .then(
          (done) => {
            if (!done && Date.now() - firstAt < this.opts.graceMs) this.later(sessionId, firstAt);
          },
          (err: unknown) => {
            this.opts.log.warn({ err, session: sessionId }, 'webhook fan-out failed; retrying');
            if (Date.now() - firstAt < this.opts.graceMs) this.later(sessionId, firstAt);
          },
        )
        .finally(() => {
          this.running--;
          this.active.delete(sessionId);
          if (this.again.delete(sessionId)) this.kick(sessionId);
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
   * anything not enqueued).
   */
  async sweep(sessionId: string): Promise<boolean> {
    const { store, owner } = this.opts;
    for (;;) {
      const read = await store.outbox.fanoutBegin(sessionId, owner, LEASE_MS, BATCH);
      if (!read) return false;
      const tenant =
        read.tenant || this.opts.tenantOf(sessionId) || (await store.outbox.sessionTenant(sessionId)) || '';
      const last = read.rows.at(-1)?.[0];
      if (!last) {
        await store.outbox.fanoutEnd(sessionId, owner, read.cursor, tenant, true);
        return true;
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
      const now = Date.now();
      await Promise.all(
        [...perHook].map(async ([id, msgs]) => {
          const r = await store.outbox.enqueue(id, msgs, now, this.opts.maxPending);
          if (r?.dropped)
            this.opts.log.warn(
              { webhook: id, tenant, dropped: r.dropped },
              'webhook outbox full; events dropped',
            );
          if (r?.added) this.opts.enqueued(id);
        }),
      );
      const full = read.rows.length >= BATCH;
      if (!(await store.outbox.fanoutEnd(sessionId, owner, last, tenant, !full))) return false;
      if (!full) return true;
    }
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.waiting.clear();
  }
}
