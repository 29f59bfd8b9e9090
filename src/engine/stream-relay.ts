import type { SessionStore } from '../store/store.js';

/**
 * Relays a turn's stream events to the event log as they arrive: a batch is written at once when no write is in
 * flight, and what arrives meanwhile is written as the next batch when that write returns (at most `maxEvents` per
 * pipeline). So an event waits at most one round trip, and a fast stream costs one round trip per batch, not per event.
 * One write at a time keeps the log in the events' order.
 *
 * Backpressure, then a bound. While a write is slower than the stream (Redis busy, a huge turn of tiny deltas) and
 * PAUSE_AT events wait, `gate()` hands the upstream body's reader (src/plugins/anthropic.ts) a promise to wait on
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

export class StreamRelay {
  private buf: Array<[string, string]>;
  /** Events dropped at the bound (see above). */
  dropped = 0;
  /** Upstream reads paused (each a `gate()` waited on). */
  pauses = 0;
  private writing: Promise<void> | null = null;
  private scheduled: NodeJS.Immediate | null = null;
  /** When the current stall began (the buffer reached PAUSE_AT), null while under it. */
  private stallSince: number | null = null;
  private waiters: Array<() => void> = [];

  constructor(
    private readonly store: SessionStore,
    private readonly id: string,
    private readonly maxEvents: number,
    initial: Array<[string, string]>,
  ) {
    this.buf = [...initial];
    if (this.buf.length) this.write();
  }

  push(ev: [string, string]): void {
    if (this.buf.length >= MAX_BUFFERED) {
      this.dropped++;
      return;
    }
    this.buf.push(ev);
    // Written at the end of this turn of the event loop, not at once: the events the SDK parses from one upstream
    // read (several, once the process is busy) then go out in one script call and one notice, which the relays
    // fan out as one write per client. Unloaded, that costs well under a millisecond of latency.
    if (!this.writing && !this.scheduled) this.scheduled = setImmediate(this.flush);
  }

  /**
   * What the upstream's reader waits on before its next read: null while fewer than PAUSE_AT events wait (or the
   * stall has lasted MAX_PAUSE_MS), else a promise that settles once they are under it, or when the pause is up.
   */
  gate(): Promise<void> | null {
    if (this.buf.length < PAUSE_AT) {
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

  private readonly flush = () => {
    this.scheduled = null;
    if (!this.writing) this.write();
  };

  private write(): void {
    const batch = this.buf.splice(0, this.maxEvents);
    if (batch.length === 0) return;
    this.writing = this.store
      .appendEvents(this.id, batch)
      .catch(() => {
        // The history is the durable record; a lost batch of deltas costs live clients some text, not the turn.
      })
      .then(() => {
        this.writing = null;
        if (this.buf.length < PAUSE_AT) {
          this.stallSince = null;
          this.release();
        }
        if (this.buf.length) this.write();
      });
  }

  /**
   * Hands back what is still buffered (it goes into the turn's commit, after the write in flight). On one Redis
   * connection the commit is sent after that write and Redis runs a connection's commands in order, so there is
   * nothing to wait for; a cluster client may send a pipeline later than it was made, so there it waits.
   */
  async drain(): Promise<Array<[string, string]>> {
    if (this.scheduled) clearImmediate(this.scheduled);
    this.scheduled = null;
    const rest = this.buf;
    this.buf = [];
    this.release();
    if (this.store.isCluster) await this.writing;
    return rest;
  }
}
