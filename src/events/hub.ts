import { EventEmitter } from 'node:events';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import type { Cluster, Redis } from 'ioredis';
import type { Metrics } from '../observability/metrics.js';
import { eventsChannel, sessionKeys } from '../store/keys.js';
import { parseStreamEntry, type StoredEvent } from '../store/store.js';
import { START, compareIds } from './cursor.js';
import { OutEvent } from './envelope.js';
import { parseNotice } from './notice.js';
import { componentLog } from '../log.js';

type RedisClient = Redis | Cluster;

/** Events read per XRANGE, for replays and for the live tail alike. */
export const PAGE_SIZE = 500;

export interface Page {
  events: StoredEvent[];
  /** The oldest event still in the log (null: no log). */
  firstId: string | null;
  /** Events after the cursor may have been trimmed away: the cursor is older than the oldest retained event. */
  expired: boolean;
}

/**
 * One page of a session's log after `after` (exclusive), read atomically (MULTI) with the oldest retained id, so
 * a trim between the two reads cannot hide a gap. `after` is canonical (see cursor.ts); START reads from the start.
 */
export async function readPage(
  redis: RedisClient,
  sessionId: string,
  after: string,
  count = PAGE_SIZE,
): Promise<Page> {
  const key = sessionKeys(sessionId).events;
  const res = await redis
    .multi()
    .xrange(key, '-', '+', 'COUNT', 1)
    .xrange(key, after === START ? '-' : `(${after}`, '+', 'COUNT', count)
    .exec();
  if (!res) throw new Error('event log read aborted');
  const [[e1, first], [e2, rows]] = res as [
    [Error | null, Array<[string, string[]]>],
    [Error | null, unknown],
  ];
  if (e1) throw e1;
  if (e2) throw e2;
  const firstId = first[0]?.[0] ?? null;
  return {
    events: (rows as Array<[string, string[]]>).map(parseStreamEntry),
    firstId,
    expired: after !== START && firstId !== null && compareIds(firstId, after) > 0,
  };
}

export async function lastEventId(redis: RedisClient, sessionId: string): Promise<string | null> {
  const rows = await redis.xrevrange(sessionKeys(sessionId).events, '+', '-', 'COUNT', 1);
  return rows[0]?.[0] ?? null;
}

export interface ExpiredInfo {
  /** The cursor the client gave. */
  cursor: string;
  first_event_id: string | null;
  last_event_id: string | null;
}

/** Where a subscription's events go: a WebSocket or an SSE response. */
export interface Sink {
  /**
   * Sends one event. Returns false when the sink cannot take more and closed itself (slow reader, socket gone,
   * end of the session): the subscription then stops.
   */
  send(ev: OutEvent): boolean;
  /** Optional: hold writes until `uncork`, so a batch of events goes out in one write. */
  cork?(): void;
  uncork?(): void;
  /**
   * Replay pacing: true at once when the transport has room, else resolves when drained (false: closed, or closed by
   * the sink as a slow reader because it did not drain in time).
   */
  ready(): true | Promise<boolean>;
  /** The cursor was trimmed away; the sink tells the client how to recover and closes. */
  expired(info: ExpiredInfo): void;
  /** The store failed (Redis down); the sink closes so the client reconnects later. */
  failed(err: unknown): void;
  /** The process shuts down. */
  shutdown(): void;
}

/**
 * One client watching one session: it replays the log from its own cursor in pages (its own XRANGEs, never more
 * than a page in memory), then joins its session's live fan-out. It joins in the same tick as it checks that its
 * cursor has reached the channel's (the id of the last event fanned out), so no event is missed or sent twice:
 * live batches hold exactly the events after the channel's cursor, and each is sent only if it is after the
 * subscription's own cursor.
 */
export class Subscription {
  live = false;
  closed = false;

  constructor(
    private readonly channel: Channel,
    private readonly sink: Sink,
    /** The id of the last event sent to this client. */
    public cursor: string,
  ) {}

  /** Stops the subscription (idempotent); the sink closes its transport itself. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.channel.remove(this);
  }

  /** @internal live delivery of one fanned-out batch (already ordered, all after the channel's old cursor). */
  deliver(batch: OutEvent[]): void {
    // One write (a writev) per batch rather than one per event: with many clients this is most of the fan-out cost.
    this.sink.cork?.();
    try {
      for (const ev of batch) {
        if (this.closed) return;
        if (compareIds(ev.id, this.cursor) <= 0) continue;
        this.cursor = ev.id;
        if (!this.sink.send(ev)) return this.close();
      }
    } finally {
      this.sink.uncork?.();
    }
  }

  /** @internal */
  expire(info: Omit<ExpiredInfo, 'cursor'>): void {
    if (this.closed) return;
    const cursor = this.cursor;
    this.close();
    this.sink.expired({ cursor, ...info });
  }

  /** @internal */
  shutdown(): void {
    if (this.closed) return;
    this.close();
    this.sink.shutdown();
  }

  /**
   * Sends one page of the replay, corked: one write per page (or per transport buffer's worth, when the sink asks
   * to wait for a drain) rather than one per event. False when the subscription ended.
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
          if (!(await ready)) {
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

  /** @internal the replay, then the switch to live. */
  async run(redis: RedisClient, pageSize: number, metrics?: Metrics): Promise<void> {
    const ch = this.channel;
    try {
      for (;;) {
        const page = await readPage(redis, ch.sessionId, this.cursor, pageSize);
        metrics?.replayPages.inc({ source: 'stream' });
        if (this.closed) return;
        if (page.expired) {
          const last = await lastEventId(redis, ch.sessionId);
          return this.expire({ first_event_id: page.firstId, last_event_id: last });
        }
        if (!(await this.replayPage(page.events))) return;
        if (page.events.length === pageSize) continue;
        await ch.ready;
        if (this.closed) return;
        // Caught up with the channel: from now on its fan-out carries every later event. Same tick as the check.
        if (compareIds(this.cursor, ch.cursor!) >= 0) {
          this.live = true;
          ch.live.add(this);
          return;
        }
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
 * A session watched by this process: one SUBSCRIBE on `ev:{id}` however many clients; the events of a notice
 * that follow the id of the last event it fanned out go out as they are, otherwise one XRANGE (pages of
 * PAGE_SIZE) from that id; each event encoded once.
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
    private readonly hub: EventHub,
    readonly sessionId: string,
  ) {
    this.ready = this.start();
    // Rejections reach the subscriptions awaiting `ready`; this one only keeps Node from calling it unhandled.
    this.ready.catch(() => {});
  }

  get channelName() {
    return eventsChannel(this.sessionId);
  }

  private async start(): Promise<void> {
    try {
      await this.hub.sub.subscribe(this.channelName);
      // Every event written from now on is notified; every event written before is at or below this id.
      const last = await lastEventId(this.hub.redis, this.sessionId);
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
          const page = await readPage(this.hub.redis, this.sessionId, this.cursor, this.hub.pageSize);
          if (this.closed) return;
          if (page.expired && this.live.size > 0) {
            // The log moved faster than this process read it: the live clients lost events.
            const last = await lastEventId(this.hub.redis, this.sessionId);
            for (const s of [...this.live]) {
              if (compareIds(page.firstId!, s.cursor) > 0)
                s.expire({ first_event_id: page.firstId, last_event_id: last });
            }
          }
          if (page.events.length === 0) break;
          this.fanOut(page.events);
          if (page.events.length < this.hub.pageSize) break;
        }
      } while (this.again && !this.closed);
    } catch (err) {
      if (this.closed) return;
      this.hub.log.warn({ err, session: this.sessionId }, 'event relay read failed; retrying');
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
  /** Commands (XRANGE). */
  redis: RedisClient;
  /** The shared subscriber-mode connection. The hub only (un)subscribes `ev:{…}` channels on it. */
  sub: RedisClient;
  log: FastifyBaseLogger;
  pageSize?: number;
  metrics?: Metrics | undefined;
}

/**
 * The per-process relay of session events to WebSocket and SSE clients. Correctness needs no state shared between
 * processes: every event is in the Redis log, a notice's events are fanned out only when they follow the channel's
 * cursor exactly (otherwise the log is read from it), and a client resumes anywhere from the id of the last event it
 * saw. Emits `slow-reader` (session id) when a sink cuts a client off, for tests and metrics.
 */
export class EventHub extends EventEmitter {
  readonly redis: RedisClient;
  readonly sub: RedisClient;
  readonly log: FastifyBaseLogger;
  readonly pageSize: number;
  readonly metrics: Metrics | undefined;
  private readonly channels = new Map<string, Channel>();
  private closed = false;

  constructor(opts: HubOptions) {
    super();
    this.redis = opts.redis;
    this.sub = opts.sub;
    this.log = opts.log;
    this.pageSize = opts.pageSize ?? PAGE_SIZE;
    this.metrics = opts.metrics;
    this.sub.on('message', this.onMessage);
    this.sub.on('ready', this.onReconnect);
  }

  private readonly onMessage = (channel: string, message: string) => {
    if (!channel.startsWith('ev:{')) return;
    this.channels.get(channel.slice(4, -1))?.notify(message);
  };

  /**
   * Notifications sent while the subscriber was disconnected are lost: read every watched log again, now and once
   * more a second later (after ioredis has re-subscribed the channels).
   */
  private readonly onReconnect = () => {
    const pullAll = () => {
      for (const ch of this.channels.values()) void ch.pull();
    };
    pullAll();
    setTimeout(pullAll, 1000).unref();
  };

  /** Starts streaming `sessionId`'s events after `after` (canonical cursor) to `sink`. */
  subscribe(sessionId: string, after: string, sink: Sink): Subscription {
    if (this.closed) throw new Error('event hub closed');
    let ch = this.channels.get(sessionId);
    if (!ch) {
      ch = new Channel(this, sessionId);
      this.channels.set(sessionId, ch);
    }
    const s = new Subscription(ch, sink, after);
    ch.add(s);
    void s.run(this.redis, this.pageSize, this.metrics);
    return s;
  }

  /** @internal the channel has no subscriber left (or failed to start). */
  drop(ch: Channel): void {
    if (this.channels.get(ch.sessionId) !== ch) return;
    this.channels.delete(ch.sessionId);
    ch.stop();
    // Only channels this hub subscribed; the engine's `ctl:{…}` subscriptions on the same connection are its own.
    this.sub.unsubscribe(ch.channelName).catch(() => {});
  }

  /** Watched sessions and clients in this process. */
  counts(): { sessions: number; clients: number; live: number } {
    let clients = 0;
    let live = 0;
    for (const ch of this.channels.values()) {
      clients += ch.subs.size;
      live += ch.live.size;
    }
    return { sessions: this.channels.size, clients, live };
  }

  /** Ends every subscription (sinks close their transports) and leaves every channel. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const ch of [...this.channels.values()]) for (const s of [...ch.subs]) s.shutdown();
    for (const ch of [...this.channels.values()]) this.drop(ch);
    this.sub.off('message', this.onMessage);
    this.sub.off('ready', this.onReconnect);
  }
}

const hubs = new WeakMap<object, EventHub>();

/** The hub of a service instance (one per process and Redis subscriber), created on first use. */
export function hubFor(app: FastifyInstance): EventHub {
  let hub = hubs.get(app.redisSub);
  if (!hub) {
    hub = new EventHub({
      redis: app.redis,
      sub: app.redisSub,
      log: componentLog(app.log, 'events'),
      metrics: app.metrics,
    });
    hubs.set(app.redisSub, hub);
    const h = hub;
    app.addHook('onClose', async () => h.close());
  }
  return hub;
}
