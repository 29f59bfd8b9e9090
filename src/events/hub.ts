/**
 * The per-process relay of session event logs to WebSocket/SSE readers: live notices fanned out, replays paged by
 * bytes, one subscription per session with readers. The live tail and the replay share one reader state (cursor,
 * page, drain), so both are here; what the hub asks of a reader's transport is in reader.ts, and the replays'
 * turns per tenant (how many read and hold pages at once) are replay-gate.ts. Over 400 lines for that shared state.
 */
import { EventEmitter } from 'node:events';
import type { FastifyBaseLogger } from 'fastify';
import type { Metrics } from '../observability/metrics.js';
import type { SessionChannels } from '../store/channels.js';
import type { EventLog, PageLimits } from '../store/events.js';
import type { StoredEvent } from '../store/store.js';
import { START, compareIds, lostAfter, placeCursor } from './cursor.js';
import { OutEvent } from './envelope.js';
import { parseNotice } from './notice.js';
import type { ExpiredInfo, Sink } from './reader.js';
import { type HeldBytes, TenantBuffers } from './tenant-buffers.js';
import {
  REPLAY_PAGES_PER_TENANT,
  REPLAY_READS_PER_PROCESS,
  REPLAY_READS_PER_TENANT,
  ReplayGate,
  type ReplayLimits,
  type Waiter,
} from './replay-gate.js';

/** Most events read per page, for replays and for the live tail alike. */
export const PAGE_SIZE = 500;
/** Byte budget of a page (REPLAY_PAGE_BYTES): what one replaying client holds at most, plus one larger event. */
export const PAGE_BYTES = 1_048_576;

/**
 * One client watching one session: it replays the log from its own cursor in pages (bounded in events and bytes:
 * one page in memory at a time, the next read only once the transport drained; each page in a turn of its tenant's,
 * replay-gate.ts), then joins its session's live
 * fan-out. It joins in the same tick as it checks that its cursor has reached the channel's (the id of the last
 * event fanned out), so no event is missed or sent twice: live batches hold exactly the events after the channel's
 * cursor, and each is sent only if it is after the subscription's own cursor.
 */
export class Subscription implements Waiter, HeldBytes {
  live = false;
  /** Bytes its transport held queued when last counted against its tenant (tenant-buffers.ts). */
  held = 0;
  closed = false;
  /** Waiting for its transport to drain during the replay (a reader that does not read stays here). */
  draining = false;
  /** Set while its replay waits for a page place of its tenant's (replay-gate.ts): cancels the wait. */
  cancelWait: (() => void) | null = null;

  constructor(
    private readonly channel: Channel,
    private readonly sink: Sink,
    /** The id of the last event sent to this client. */
    public cursor: string,
    /** Whose replay this is: its pages take turns with the tenant's other replays (replay-gate.ts). */
    private readonly tenant: string,
    /** The session was deleted before the subscription (its log is kept a while): it ends once caught up. */
    private readonly deleted = false,
  ) {}

  /** Stops the subscription (idempotent); the sink closes its transport itself. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.cancelWait?.();
    this.channel.hub.buffers.forget(this.tenant, this);
    this.channel.remove(this);
  }

  buffered(): number {
    return this.sink.buffered?.() ?? 0;
  }

  /** @internal live delivery of one fanned-out batch (already ordered, all after the channel's old cursor). */
  deliver(batch: OutEvent[]): void {
    // One write (a writev) per batch rather than one per event: with many clients this is most of the fan-out cost.
    // A batch of one event is one write already: no cork (at a paced stream's rate, the usual batch).
    const cork = batch.length > 1;
    if (cork) this.sink.cork?.();
    try {
      for (const ev of batch) {
        if (this.closed) return;
        if (compareIds(ev.id, this.cursor) <= 0) continue;
        this.cursor = ev.id;
        if (!this.sink.send(ev)) return this.close();
      }
    } finally {
      if (cork) this.sink.uncork?.();
    }
    this.count();
  }

  /**
   * Counts what its transport holds queued against its tenant's bound (tenant-buffers.ts), after each live batch
   * and each answer of its own connection's: a client that keeps up has nothing queued (one comparison).
   */
  count(): void {
    const buffers = this.channel.hub.buffers;
    if (!this.closed && buffers.bounded) buffers.note(this.tenant, this, this.buffered());
  }

  /** Cut for its tenant's bound: closed as a slow reader. */
  cut(): void {
    if (this.closed) return;
    this.close();
    this.sink.cutOff?.();
  }

  /** @internal */
  expire(info: Omit<ExpiredInfo, 'cursor'>): void {
    if (this.closed) return;
    const cursor = this.cursor;
    this.close();
    this.sink.expired({ cursor, ...info });
  }

  /** The session and its log are gone: the stream ends as after `session.deleted`. */
  private gone(): void {
    if (this.closed) return;
    this.close();
    this.sink.gone();
  }

  /** @internal */
  shutdown(): void {
    if (this.closed) return;
    this.close();
    this.sink.shutdown();
  }

  /**
   * Sends one page of the replay, corked: one write per page (or per transport buffer's worth, when the sink asks
   * to wait for a drain) rather than one per event. Returns once the transport has room again (the next page is
   * read only then); false when the subscription ended.
   */
  private async replayPage(events: StoredEvent[]): Promise<boolean> {
    const sessionId = this.channel.sessionId;
    let corked = false;
    try {
      for (const raw of events) {
        if (!corked) {
          this.sink.cork?.();
          corked = true;
        }
        const ev = new OutEvent(sessionId, raw);
        this.cursor = ev.id;
        if (!this.sink.send(ev)) {
          this.close();
          return false;
        }
        const ready = this.sink.ready();
        if (ready !== true) {
          this.sink.uncork?.();
          corked = false;
          this.draining = true;
          const ok = await ready;
          this.draining = false;
          if (!ok) {
            this.close();
            return false;
          }
        }
        if (this.closed) return false;
      }
      return true;
    } finally {
      if (corked) this.sink.uncork?.();
    }
  }

  /**
   * One page of the replay, in a page place of its tenant's (held from the read until the transport took the whole
   * page, so a tenant's readers that do not read hold at most REPLAY_PAGES_PER_TENANT pages in this process), read
   * in a read place (replay-gate.ts). 'more': read on; 'end': the log's end as it was read; 'none': there is no log;
   * 'stop': the subscription ended.
   */
  private async nextPage(hub: EventHub): Promise<'more' | 'end' | 'none' | 'stop'> {
    const ch = this.channel;
    const entered = hub.replays.enterPage(this.tenant, this);
    if (entered !== true && !(await entered)) return 'stop';
    try {
      if (this.closed) return 'stop';
      const page = await hub.replays.read(this.tenant, () =>
        hub.eventLog.page(ch.sessionId, this.cursor, hub.pageLimits),
      );
      hub.metrics?.replayPages.inc({ source: 'stream' });
      if (this.closed) return 'stop';
      // A cursor past the newest event (refused by the routes before they subscribe) simply waits for newer
      // events: the live fan-out sends only what follows the subscription's cursor.
      if (page.lastId === null) return 'none';
      if (placeCursor(this.cursor, page) === 'expired') {
        this.expire({ first_event_id: page.firstId, last_event_id: page.lastId });
        return 'stop';
      }
      if (!(await this.replayPage(page.events))) return 'stop';
      return page.more ? 'more' : 'end';
    } finally {
      hub.replays.leavePage(this.tenant);
    }
  }

  /** @internal the replay, then the switch to live. */
  async run(hub: EventHub): Promise<void> {
    const ch = this.channel;
    try {
      for (;;) {
        const next = await this.nextPage(hub);
        if (next === 'stop') return;
        if (next === 'more') continue;
        await ch.ready;
        if (this.closed) return;
        // Caught up with the channel: from now on its fan-out carries every later event. Same tick as the check.
        if (compareIds(this.cursor, ch.cursor!) >= 0) {
          // A deleted session's reader caught up past its `session.deleted` (it had seen it; its replay would have
          // ended at it otherwise): nothing more will come, it ends as at that event.
          if (this.deleted) return this.gone();
          this.live = true;
          ch.live.add(this);
          return;
        }
        // No log, though the channel has fanned out events past this cursor: the session was deleted and its log,
        // kept DELETED_LOG_TTL_MS for its `session.deleted`, has expired since. Nothing more will come; reading again
        // would find the same empty page for ever.
        if (next === 'none') return this.gone();
        // The channel has fanned out events this replay has not read yet: read on.
      }
    } catch (err) {
      if (this.closed) return;
      this.close();
      this.sink.failed(err);
    }
  }
}

/**
 * A session watched by this process: one SUBSCRIBE of its events channel however many clients; the events of a
 * notice that follow the id of the last event it fanned out go out as they are, otherwise the log is read from
 * that id (bounded pages); each event encoded once.
 */
class Channel {
  readonly subs = new Set<Subscription>();
  readonly live = new Set<Subscription>();
  /** Id of the last event fanned out (or known to exist when the channel started); null until ready. */
  cursor: string | null = null;
  readonly ready: Promise<void>;
  private pulling = false;
  private again = false;
  private retry: NodeJS.Timeout | null = null;
  closed = false;

  constructor(
    readonly hub: EventHub,
    readonly sessionId: string,
  ) {
    this.ready = this.start();
    // Rejections reach the subscriptions awaiting `ready`; this one only keeps Node from calling it unhandled.
    this.ready.catch(() => {});
  }

  private async start(): Promise<void> {
    try {
      await this.hub.channels.watchEvents(this.sessionId);
      // Every event written from now on is notified; every event written before is at or below this id.
      const last = await this.hub.eventLog.lastId(this.sessionId);
      if (this.closed) return;
      this.cursor = last ?? START;
    } catch (err) {
      this.hub.drop(this);
      throw err;
    }
    if (this.again) void this.pull();
  }

  /**
   * A notice of events written. When it carries the events and they follow this channel's cursor exactly, they are
   * fanned out at once (no read: the common case of a live turn); in any other case the log is read from the
   * cursor, which also covers a notice lost while the subscriber connection was down.
   */
  notify(message: string): void {
    const notice = parseNotice(message);
    if (this.cursor !== null && notice.newest && compareIds(notice.newest, this.cursor) <= 0) return;
    if (notice.kind === 'events' && !this.pulling && this.cursor === notice.prev) {
      this.fanOut(notice.events);
      return;
    }
    void this.pull();
  }

  /** Fans out events that directly follow the cursor, in log order. */
  private fanOut(events: StoredEvent[]): void {
    const batch = events.map((e) => new OutEvent(this.sessionId, e));
    this.cursor = batch[batch.length - 1]!.id;
    for (const s of [...this.live]) s.deliver(batch);
    // Once per batch, after the writes: the lag of its oldest event (appended at `at`, Redis time, ms).
    const m = this.hub.metrics;
    if (m && this.live.size > 0) {
      m.eventsRelayed.inc(batch.length);
      m.relayLag.observe(Math.max(0, Date.now() - events[0]!.at) / 1000);
    }
  }

  /** Reads everything after `cursor` and fans it out; coalesces notifications that arrive meanwhile. */
  async pull(): Promise<void> {
    if (this.closed) return;
    if (this.cursor === null || this.pulling) {
      this.again = true;
      return;
    }
    this.pulling = true;
    try {
      do {
        this.again = false;
        for (;;) {
          const page = await this.hub.eventLog.page(this.sessionId, this.cursor, this.hub.pageLimits);
          if (this.closed) return;
          if (this.live.size > 0 && lostAfter(this.cursor, page)) {
            // The log moved faster than this process read it: the live clients lost events.
            for (const s of [...this.live]) {
              if (lostAfter(s.cursor, page))
                s.expire({ first_event_id: page.firstId, last_event_id: page.lastId });
            }
          }
          if (page.events.length === 0) break;
          this.fanOut(page.events);
          if (!page.more) break;
        }
      } while (this.again && !this.closed);
    } catch (err) {
      if (this.closed) return;
      this.hub.logger.warn({ err, session: this.sessionId }, 'event relay read failed; retrying');
      this.retry ??= setTimeout(() => {
        this.retry = null;
        void this.pull();
      }, 1000);
      this.retry.unref();
    } finally {
      this.pulling = false;
    }
  }

  add(s: Subscription) {
    this.subs.add(s);
  }

  remove(s: Subscription) {
    this.subs.delete(s);
    this.live.delete(s);
    if (this.subs.size === 0) this.hub.drop(this);
  }

  stop() {
    this.closed = true;
    if (this.retry) clearTimeout(this.retry);
  }
}

export interface HubOptions {
  /** Reads of the event logs. */
  eventLog: EventLog;
  /** The sessions' pub/sub channels; the hub watches the events channels of the sessions it has clients of. */
  channels: SessionChannels;
  logger: FastifyBaseLogger;
  /** Most events per page (default PAGE_SIZE). */
  pageSize?: number;
  /** Byte budget of a page (default PAGE_BYTES). */
  pageBytes?: number;
  /** Bounds on the replays' pages and reads (default replay-gate.ts's constants). */
  replayLimits?: Partial<ReplayLimits>;
  /** Bytes one tenant's streams may hold queued in this process (TENANT_MAX_STREAM_BUFFERED_BYTES; 0: no bound). */
  tenantBufferedBytes?: number;
  metrics?: Metrics | undefined;
}

/**
 * The per-process relay of session events to WebSocket and SSE clients. Correctness needs no state shared between
 * processes: every event is in the Redis log, a notice's events are fanned out only when they follow the channel's
 * cursor exactly (otherwise the log is read from it), and a client resumes anywhere from the id of the last event it
 * saw. Emits `slow-reader` (session id, transport) when a sink cuts a client off, for tests and metrics. It talks to
 * Redis only through the store (EventLog, SessionChannels); src/plugins/events-hub.ts makes one per service.
 */
export class EventHub extends EventEmitter {
  readonly eventLog: EventLog;
  readonly channels: SessionChannels;
  readonly logger: FastifyBaseLogger;
  readonly pageLimits: PageLimits;
  readonly metrics: Metrics | undefined;
  /** The turns of the replays' pages, per tenant and for the process (replay-gate.ts). */
  readonly replays: ReplayGate;
  /** The bytes each tenant's live streams hold queued (tenant-buffers.ts). */
  readonly buffers: TenantBuffers;
  private readonly watched = new Map<string, Channel>();
  private readonly stopListening: Array<() => void>;
  private closed = false;

  constructor(opts: HubOptions) {
    super();
    this.eventLog = opts.eventLog;
    this.channels = opts.channels;
    this.logger = opts.logger;
    this.pageLimits = { count: opts.pageSize ?? PAGE_SIZE, maxBytes: opts.pageBytes ?? PAGE_BYTES };
    this.metrics = opts.metrics;
    this.buffers = new TenantBuffers(opts.tenantBufferedBytes ?? 0);
    this.replays = new ReplayGate({
      pagesPerTenant: REPLAY_PAGES_PER_TENANT,
      readsPerTenant: REPLAY_READS_PER_TENANT,
      readsPerProcess: REPLAY_READS_PER_PROCESS,
      ...opts.replayLimits,
    });
    this.stopListening = [
      this.channels.onEvents((id, message) => this.watched.get(id)?.notify(message)),
      this.channels.onReconnect(this.onReconnect),
    ];
  }

  /**
   * Notifications sent while the subscriber was disconnected are lost: read every watched log again, now and once
   * more a second later (after ioredis has re-subscribed the channels).
   */
  private readonly onReconnect = () => {
    const pullAll = () => {
      for (const ch of this.watched.values()) void ch.pull();
    };
    pullAll();
    setTimeout(pullAll, 1000).unref();
  };

  /**
   * Starts streaming `sessionId`'s events after `after` (canonical cursor) to `sink`, a reader of `tenant`'s.
   * `deleted`: the session is already deleted (a reader resuming with its cursor, src/events/follow-check.ts).
   */
  subscribe(sessionId: string, after: string, sink: Sink, tenant: string, deleted = false): Subscription {
    if (this.closed) throw new Error('event hub closed');
    let ch = this.watched.get(sessionId);
    if (!ch) {
      ch = new Channel(this, sessionId);
      this.watched.set(sessionId, ch);
    }
    const s = new Subscription(ch, sink, after, tenant, deleted);
    ch.add(s);
    void s.run(this);
    return s;
  }

  /** @internal the channel has no subscriber left (or failed to start). */
  drop(ch: Channel): void {
    if (this.watched.get(ch.sessionId) !== ch) return;
    this.watched.delete(ch.sessionId);
    ch.stop();
    void this.channels.unwatchEvents(ch.sessionId);
  }

  /** Watched sessions and clients in this process; `draining`: clients whose replay waits for their socket. */
  counts(): { sessions: number; clients: number; live: number; draining: number } {
    let clients = 0;
    let live = 0;
    let draining = 0;
    for (const ch of this.watched.values()) {
      clients += ch.subs.size;
      live += ch.live.size;
      for (const s of ch.subs) if (s.draining) draining++;
    }
    return { sessions: this.watched.size, clients, live, draining };
  }

  /** Ends every subscription (sinks close their transports) and leaves every channel. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const ch of [...this.watched.values()]) for (const s of [...ch.subs]) s.shutdown();
    for (const ch of [...this.watched.values()]) this.drop(ch);
    for (const stop of this.stopListening) stop();
  }
}
