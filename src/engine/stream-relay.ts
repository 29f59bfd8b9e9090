import type { EventMark, SessionStore } from '../store/store.js';
import { StoreUnavailable } from '../errors.js';
import { retryDelayMs, type LiveNews } from './live-news.js';

/** How a batch's write ended: written, to be tried again (an outage), or given up (any other failure). */
type WriteOutcome = 'ok' | 'retry' | 'drop';

/**
 * Relays a turn's stream events to the event log as they arrive: a batch is written at once when no write is in
 * flight, and what arrives meanwhile is written as the next batch when that write returns (at most `maxEvents` per
 * pipeline). So an event waits at most one round trip (and the flush gap below), and a fast stream costs one round
 * trip per batch, not per event. One write at a time keeps the log in the events' order.
 *
 * The relays of one process are flushed together (FlushQueue): at the end of an event-loop turn, no sooner than the
 * flush gap after the last flush (up to 10 ms when a hundred relays are open; none for a few), every relay with
 * events waiting and no write in flight hands its batch to one script call for all of them (append-events-many.lua;
 * on a cluster, one call per session, still in one auto-pipeline). With many sessions streaming at once this is what
 * a streamed delta costs the process: one command and one reply per flush instead of per session and per delta.
 *
 * A batch is numbered under the run's live news (live-news.ts): one whose write fails (Redis restarting, paused) is
 * written again, with its numbers, after a backoff — what landed of it is skipped — and the events behind it wait.
 * At the turn's end `drain()` writes a failed batch through the outage (as `LiveNews` does) before the rest goes
 * with the commit: the stream reaches live clients whole, once, in order, through a short outage.
 *
 * Backpressure, then a bound. While a write is slower than the stream (Redis busy or away, a huge turn of tiny
 * deltas) and PAUSE_AT events wait, `gate()` hands the upstream body's reader (src/plugins/anthropic.ts) a promise to wait on
 * before its next read: the SDK gets no new events until the buffer is under PAUSE_AT again, for at most
 * MAX_PAUSE_MS per stall (a longer one would hold the upstream request open and billed while Redis is away). Past
 * that the stream runs at its own pace again and events over MAX_BUFFERED are dropped rather than held — live
 * clients miss some deltas, the turn's reply is whole in the history and in `turn.completed`, and memory stays
 * bounded whatever the upstream sends.
 */
/** Events a relay holds unwritten at most. */
const MAX_BUFFERED = 4096;
/** Events waiting past which the upstream's reads pause (one read carries at most a few hundred). */
const PAUSE_AT = 1024;
/** The longest the upstream's reads pause in one stall (ms); the idle deadline is counted after it. */
const MAX_PAUSE_MS = 2000;
/** Most sessions in one shared script call, and most events (a call runs alone in Redis: keep it short). */
const CALL_SESSIONS = 64;
const CALL_EVENTS = 1024;
/**
 * Least time between two flushes of a process (ms), by how many relays are open: FLUSH_GAP_PER_RELAY_MS each, at most
 * FLUSH_GAP_MAX_MS. A flush that comes sooner after the last one waits for the rest of the gap. With many sessions
 * streaming, their deltas arrive spread over time (100 sessions at 20 deltas/s: one every 0.5 ms), and one flush
 * per turn of the event loop wrote them one or two per call (B9: the service's CPU per delta fell by a third with
 * a 10 ms gap at 100 sessions). A lone stream has no gap to speak of: its deltas are written as they come.
 */
const FLUSH_GAP_PER_RELAY_MS = 0.1;
const FLUSH_GAP_MAX_MS = 10;

/**
 * The relays with events waiting and no write in flight, flushed together once per event-loop turn (setImmediate:
 * the events parsed from every upstream read of one poll phase): their batches go to their store in calls of at most
 * CALL_SESSIONS sessions and CALL_EVENTS events. A relay is in it at most once (`StreamRelay.queued`).
 */
class FlushQueue {
  private due: StreamRelay[] = [];
  private scheduled = false;
  /** When the last flush ran (performance.now(), ms). */
  private lastRun = -Infinity;
  /** Relays made and not drained yet (a turn drains its relay in a `finally`). */
  open = 0;

  add(relay: StreamRelay): void {
    this.due.push(relay);
    if (this.scheduled) return;
    this.scheduled = true;
    const gap = Math.min(FLUSH_GAP_MAX_MS, this.open * FLUSH_GAP_PER_RELAY_MS);
    const wait = this.lastRun + gap - performance.now();
    if (wait >= 1) setTimeout(this.run, wait);
    else setImmediate(this.run);
  }

  private readonly run = () => {
    this.scheduled = false;
    this.lastRun = performance.now();
    const due = this.due;
    this.due = [];
    // Tests run several services (stores) in one process: each store gets its own calls.
    const byStore = new Map<SessionStore, StreamRelay[]>();
    for (const relay of due) {
      if (!relay.takeTurn()) continue;
      const list = byStore.get(relay.store);
      if (list) list.push(relay);
      else byStore.set(relay.store, [relay]);
    }
    for (const [store, relays] of byStore) {
      let call: StreamRelay[] = [];
      let events = 0;
      for (const relay of relays) {
        const n = Math.min(relay.pending, relay.maxEvents);
        if (call.length > 0 && (call.length >= CALL_SESSIONS || events + n > CALL_EVENTS)) {
          StreamRelay.writeTogether(store, call);
          call = [];
          events = 0;
        }
        call.push(relay);
        events += n;
      }
      if (call.length > 0) StreamRelay.writeTogether(store, call);
    }
  };
}

const queue = new FlushQueue();

export class StreamRelay {
  private buf: Array<[string, string]>;
  /** Events dropped at the bound (see above). */
  dropped = 0;
  /** Upstream reads paused (each a `gate()` waited on). */
  pauses = 0;
  private writing: Promise<void> | null = null;
  /** The batch being written, or whose write failed and is tried again: it goes before anything else. */
  private batch: { events: Array<[string, string]>; mark: EventMark } | null = null;
  /** Failed writes in a row (the backoff's attempt). */
  private failures = 0;
  private retryTimer: NodeJS.Timeout | null = null;
  /** In the flush queue (its turn not taken yet). */
  private queued = false;
  /** Drained: the turn took the rest; nothing more is written from here. */
  private drained = false;
  /** When the current stall began (the buffer reached PAUSE_AT), null while under it. */
  private stallSince: number | null = null;
  private waiters: Array<() => void> = [];

  constructor(
    readonly store: SessionStore,
    private readonly news: LiveNews,
    private readonly id: string,
    readonly maxEvents: number,
    initial: Array<[string, string]>,
  ) {
    this.buf = [...initial];
    queue.open++;
    if (this.buf.length) this.schedule();
  }

  /** Events waiting to be written (a failed batch's included). */
  get pending(): number {
    return this.buf.length + (this.batch?.events.length ?? 0);
  }

  push(ev: [string, string]): void {
    if (this.pending >= MAX_BUFFERED) {
      this.dropped++;
      return;
    }
    this.buf.push(ev);
    // Written at the end of this turn of the event loop, not at once: the events the SDK parses from one upstream
    // read (several, once the process is busy), and those of every other relay of the process meanwhile, then go out
    // in one script call and one notice per session, which the relays fan out as one write per client. Unloaded,
    // that costs well under a millisecond of latency.
    this.schedule();
  }

  private schedule(): void {
    if (this.writing || this.queued || this.drained || this.retryTimer) return;
    this.queued = true;
    queue.add(this);
  }

  /**
   * What the upstream's reader waits on before its next read: null while fewer than PAUSE_AT events wait (or the
   * stall has lasted MAX_PAUSE_MS), else a promise that settles once they are under it, or when the pause is up.
   */
  gate(): Promise<void> | null {
    if (this.pending < PAUSE_AT) {
      this.stallSince = null;
      return null;
    }
    const now = Date.now();
    this.stallSince ??= now;
    const left = this.stallSince + MAX_PAUSE_MS - now;
    if (left <= 0) return null;
    this.pauses++;
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, left);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private release(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** @internal the flush queue's turn: true when this relay has a batch to write now. */
  takeTurn(): boolean {
    if (!this.queued) return false;
    this.queued = false;
    return !this.writing && !this.drained && this.pending > 0;
  }

  /** The batch to write now: the failed one again, else the next one, numbered. */
  private nextBatch(): { events: Array<[string, string]>; mark: EventMark } {
    if (!this.batch) {
      const events = this.buf.splice(0, this.maxEvents);
      this.batch = { events, mark: this.news.take(events.length) };
    }
    return this.batch;
  }

  /** @internal the relays' batches in one store call; each relay's next batch waits for it. */
  static writeTogether(store: SessionStore, relays: StreamRelay[]): void {
    const batches = relays.map((r) => {
      const { events, mark } = r.nextBatch();
      return [r.id, events, mark] as const;
    });
    // Only an outage is worth a retry; any other failure would come again: the batches are given up.
    const written = store.appendEventsMany(batches).then(
      (): WriteOutcome => 'ok',
      (err: unknown): WriteOutcome => (err instanceof StoreUnavailable ? 'retry' : 'drop'),
    );
    for (const r of relays) r.wrote(written);
  }

  private wrote(written: Promise<WriteOutcome>): void {
    this.writing = written.then((outcome) => {
      this.writing = null;
      const ok = outcome !== 'retry';
      if (outcome === 'drop') this.news.onDropped(this.batch?.events.length ?? 0, 'error');
      if (ok) {
        this.batch = null;
        this.failures = 0;
      }
      if (this.drained) return;
      if (this.pending < PAUSE_AT) {
        this.stallSince = null;
        this.release();
      }
      if (!ok) {
        // Tried again after a backoff, with what came meanwhile behind it (drain() takes over if the turn ends).
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          this.schedule();
        }, retryDelayMs(this.failures++));
        return;
      }
      if (this.buf.length) this.schedule();
    });
  }

  /**
   * Hands back what is still buffered (it goes into the turn's commit), once the write in flight has answered and a
   * batch whose write failed is written (through an outage, as LiveNews writes: the commit would wait as long). On
   * one Redis connection the commit would be sent after the write in flight anyway, but a write that fails must be
   * sent again before the commit's events, not after.
   */
  async drain(): Promise<Array<[string, string]>> {
    // Still queued: the flush skips it (takeTurn), its events go with the commit.
    if (!this.drained) queue.open--;
    this.drained = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    this.release();
    await this.writing;
    if (this.batch) {
      await this.news.writeThrough(this.batch.events, this.batch.mark);
      this.batch = null;
    }
    const rest = this.buf;
    this.buf = [];
    return rest;
  }
}
