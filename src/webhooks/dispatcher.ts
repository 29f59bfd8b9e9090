import type { FastifyBaseLogger as Logger } from 'fastify';
import { FailureLog } from '../log.js';
import type { Metrics } from '../observability/metrics.js';
import { attempt } from './attempt.js';
import type { Fanout } from './fanout.js';
import type { SecretBox } from './secrets.js';
import type { DeliveryLogEntry, OutboxLimits } from './outbox.js';
import type { WebhookStore } from './store.js';

/**
 * Drains the outboxes, on every replica. Each `pollMs` it claims the messages of endpoints that are due in
 * `wh:due` (claim-5.lua: within the endpoint's concurrency limit across replicas, under a lease of the attempt's
 * timeout plus a margin, so a dead replica's attempts are claimed again once their lease expires) and sweeps the
 * session marks old enough to be dropped (see tap.ts). An endpoint that got messages in this process is claimed at
 * once. Each attempt is settled (settle-7.lua): delivered, or retried after an exponential delay with jitter, for
 * `retryForMs` after its first attempt; an endpoint failing for `disableAfterMs` is disabled.
 */

/** Due endpoints read per page of a poll, and the most pages one poll reads (see `poll`). */
const POLL_PAGE = 50;
const POLL_PAGES = 10;

export interface DispatcherOptions {
  store: WebhookStore;
  fanout: Fanout;
  box: SecretBox;
  log: Logger;
  pollMs: number;
  graceMs: number;
  timeoutMs: number;
  retryBaseMs: number;
  retryMaxMs: number;
  allowPrivate: boolean;
  limits: OutboxLimits;
  /** Attempts in flight at once in this process, all endpoints together. */
  processMax: number;
  /** `trs_webhook_deliveries_total{outcome}`: one count per settled attempt. */
  metrics?: Metrics | undefined;
}

/** `base · 2^(attempt-1)` capped at `max`, the upper half jittered: spreads retries of many messages apart. */
export function retryDelay(attemptNo: number, baseMs: number, maxMs: number, random = Math.random()): number {
  const d = Math.min(maxMs, baseMs * 2 ** Math.min(attemptNo - 1, 40));
  return Math.round(d / 2 + (random * d) / 2);
}

/** The session and event ids a message id carries (`msg_<session>_<event id>`), for the deliveries log. */
function idsOf(msgId: string): { session: string | null; event: string | null } {
  const m = /^msg_(ses_[A-Za-z0-9]+)_(\d+-\d+)$/.exec(msgId);
  return m ? { session: m[1]!, event: m[2]! } : { session: null, event: null };
}

export class Dispatcher {
  private timer: NodeJS.Timeout | undefined;
  private inflight = 0;
  private readonly claiming = new Set<string>();
  private readonly kicked = new Set<string>();
  private readonly attempts = new Set<Promise<void>>();
  private polling = false;
  private stopped = false;
  /** One warning per Redis outage (and a reminder a minute), not one per poll. */
  private readonly pollFailures: FailureLog;
  /** Attempts in flight in this process per tenant, and the tenant of each endpoint seen (fairness). */
  private readonly perTenant = new Map<string, number>();
  private readonly tenantOf = new Map<string, string>();

  private readonly tenantMax: number;

  constructor(private readonly opts: DispatcherOptions) {
    this.tenantMax = Math.max(1, Math.floor(opts.processMax / 4));
    this.pollFailures = new FailureLog(opts.log, 'webhook poll');
  }

  start(): void {
    const tick = () => {
      this.timer = setTimeout(() => {
        void this.poll().finally(() => {
          if (!this.stopped) tick();
        });
      }, this.opts.pollMs);
    };
    tick();
  }

  /** Claims the endpoint's due messages now (it just got some). */
  kick(webhookId: string): void {
    if (this.stopped) return;
    if (this.claiming.has(webhookId)) {
      this.kicked.add(webhookId);
      return;
    }
    // At its tenant's cap the endpoint waits for the poll, which finds it in `wh:due`.
    if (this.tenantFull(webhookId)) return;
    void this.claimAndSend(webhookId, undefined);
  }

  /** One tenant's endpoints may take at most a quarter of this process's attempts: others are not slowed. */
  private tenantFull(webhookId: string): boolean {
    const tenant = this.tenantOf.get(webhookId);
    return tenant !== undefined && (this.perTenant.get(tenant) ?? 0) >= this.tenantMax;
  }

  private async poll(): Promise<void> {
    if (this.polling) return;
    this.polling = true;
    const { store } = this.opts;
    try {
      // The oldest due endpoints, paged past those this process cannot claim now (claiming, or their tenant at its
      // cap): a tenant's many endpoints waiting at the head (a backlog to a slow receiver) keep their old scores, and
      // reading only the head would leave every other tenant's behind them.
      let started = 0;
      for (let page = 0, offset = 0; page < POLL_PAGES && this.inflight < this.opts.processMax; page++) {
        const { due } = await store.outbox.due(POLL_PAGE, offset);
        for (const [id, score] of due) {
          if (this.claiming.has(id) || this.tenantFull(id)) continue;
          void this.claimAndSend(id, score);
          started++;
        }
        if (due.length < POLL_PAGE || started >= POLL_PAGE) break;
        offset += due.length;
      }
      // Marks are of the replicas' clocks (WEBHOOK_SWEEP_GRACE_MS must exceed their skew).
      const marks = await store.outbox.staleMarks(Date.now() - this.opts.graceMs, 20);
      await Promise.all(
        marks.map(async ([sessionId, score]) => {
          const sweepStart = Date.now();
          if (await this.opts.fanout.sweep(sessionId))
            await store.outbox.markDone(sessionId, score, sweepStart - this.opts.graceMs);
        }),
      );
      this.pollFailures.ok();
    } catch (err) {
      if (!this.stopped) this.pollFailures.failed(err);
    } finally {
      this.polling = false;
    }
  }

  /** Adds `n` to this process's attempts in flight, and to `tenant`'s (unknown: none). */
  private hold(tenant: string | undefined, n: number): void {
    this.inflight += n;
    if (tenant === undefined) return;
    const left = (this.perTenant.get(tenant) ?? 0) + n;
    if (left > 0) this.perTenant.set(tenant, left);
    else this.perTenant.delete(tenant);
  }

  private async claimAndSend(webhookId: string, seenScore: number | undefined): Promise<void> {
    const { store, log, limits } = this.opts;
    this.claiming.add(webhookId);
    try {
      // The endpoint's tenant, read once (then kept): its claim must know the tenant's room before it is sent.
      let tenant = this.tenantOf.get(webhookId);
      if (tenant === undefined) {
        tenant = (await store.outbox.tenantOf(webhookId)) ?? undefined;
        if (this.tenantOf.size > 10_000) this.tenantOf.clear();
        if (tenant !== undefined) this.tenantOf.set(webhookId, tenant);
      }
      // The room this claim may fill is held from here, before the claim is sent: claims of one tenant's endpoints
      // run at once, and each would otherwise see the room its siblings are about to fill.
      const room = Math.min(
        limits.concurrency,
        this.opts.processMax - this.inflight,
        tenant === undefined ? 1 : this.tenantMax - (this.perTenant.get(tenant) ?? 0),
      );
      if (room <= 0) return; // still due: the poll comes back to it
      this.hold(tenant, room);
      let r: Awaited<ReturnType<typeof store.outbox.claim>>;
      try {
        r = await store.outbox.claim(webhookId, limits, room);
      } catch (err) {
        this.hold(tenant, -room);
        throw err;
      }
      // What was taken stays held (one per attempt, let go as each ends); the rest is let go now.
      const taken = r.kind === 'ok' ? r.messages.length : 0;
      this.hold(tenant, taken - room);
      if (r.kind !== 'ok') {
        if (seenScore !== undefined) await store.outbox.reschedule(webhookId, seenScore, -1);
        return;
      }
      const owner = tenant ?? r.tenant;
      // A tenant unknown before the claim (its read failed): its count takes the attempts from here on.
      if (tenant === undefined && taken > 0)
        this.perTenant.set(owner, (this.perTenant.get(owner) ?? 0) + taken);
      let secret: string;
      try {
        secret = this.opts.box.open(r.secret);
      } catch (err) {
        log.error({ err, webhook: webhookId }, 'webhook secret cannot be opened; attempts fail');
        secret = '';
      }
      for (const m of r.messages) {
        const p = this.send(webhookId, r.url, secret, m.msgId, m.attempt, m.body).finally(() => {
          this.hold(owner, -1);
          this.attempts.delete(p);
        });
        this.attempts.add(p);
      }
      if (seenScore !== undefined) await store.outbox.reschedule(webhookId, seenScore, r.next);
      else await store.outbox.nudge(webhookId, r.next);
    } catch (err) {
      if (!this.stopped) log.warn({ err, webhook: webhookId }, 'webhook claim failed');
    } finally {
      this.claiming.delete(webhookId);
      if (this.kicked.delete(webhookId)) this.kick(webhookId);
    }
  }

  private async send(
    webhookId: string,
    url: string,
    secret: string,
    msgId: string,
    attemptNo: number,
    body: string,
  ): Promise<void> {
    const { store, log, limits } = this.opts;
    const at = new Date();
    const res = secret
      ? await attempt({
          webhookId,
          url,
          secret,
          msgId,
          body,
          timeoutMs: this.opts.timeoutMs,
          allowPrivate: this.opts.allowPrivate,
        })
      : { ok: false, statusCode: null, error: 'secret unavailable', durationMs: 0 };
    const ids = idsOf(msgId);
    const entry: DeliveryLogEntry = {
      message_id: msgId,
      event_id: ids.event,
      event_type: eventType(body),
      session_id: ids.session,
      attempt: attemptNo,
      status_code: res.statusCode,
      error: res.error,
      duration_ms: res.durationMs,
      at: at.toISOString(),
    };
    try {
      const delay = retryDelay(attemptNo, this.opts.retryBaseMs, this.opts.retryMaxMs);
      const s = await store.outbox.settle(webhookId, msgId, res.ok, delay, entry, limits);
      this.opts.metrics?.webhook(s.outcome);
      log.debug(
        {
          webhook: webhookId,
          message: msgId,
          attempt: attemptNo,
          outcome: s.outcome,
          status: res.statusCode,
        },
        'webhook attempt',
      );
      if (s.outcome === 'disabled') {
        log.warn({ webhook: webhookId }, 'webhook disabled after failing for too long');
        const w = await store.load(webhookId);
        if (w) await store.reindex(w);
        return;
      }
      if (s.outcome === 'gave_up')
        log.warn({ webhook: webhookId, message: msgId }, 'webhook delivery given up');
      await store.outbox.nudge(webhookId, s.next);
      if (s.next >= 0 && s.next <= s.now) this.kick(webhookId);
    } catch (err) {
      // Unsettled: the lease expires and the message is claimed again (at least once).
      if (!this.stopped) log.warn({ err, webhook: webhookId }, 'webhook settle failed');
    }
  }

  /** Stops polling and waits (bounded by the attempt timeout) for attempts in flight to settle. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await Promise.allSettled([...this.attempts]);
  }
}

function eventType(body: string): string {
  const m = /"type":"([^"]{1,64})"/.exec(body);
  return m ? m[1]! : 'unknown';
}
