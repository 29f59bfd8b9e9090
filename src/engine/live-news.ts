import { randomBytes } from 'node:crypto';
import { StoreUnavailable } from '../errors.js';
import type { EventMark, SessionStore } from '../store/store.js';

/**
 * A run's live news: the events that change no session field (`turn.started`, the stream's deltas, a turn's
 * `turn.completed` and `tool.started` ahead of the commit that stores it, `compaction.started`), written to the
 * session's log as they happen, at least once and never twice, in order.
 *
 * Every event gets a number under the run's mark token (lua/includes/event-mark.lua). A write that fails — Redis
 * restarting, paused, failing over — may still have run (a timeout, a dropped connection: the store cannot know), so
 * it is sent again under the same numbers, and the script skips what landed. Until it lands nothing later is written
 * under the mark (a later batch would move the mark past the one that failed): `send` writes one batch at a time,
 * the stream relay holds its batches back behind a failed one (src/engine/stream-relay.ts), and a run's commits wait
 * for `idle()` (src/engine/commit.ts), so the events that go with a commit come after the news before them.
 *
 * A batch is tried again until it lands, for at most `giveUpAfterMs` (the lease TTL: the commit that follows rides
 * out an outage as long), or until the run stops; then it is given up (`dropped`): live clients miss it, the
 * history is whole (counted in `trs_live_events_dropped_total{reason="outage"}`). Any other error of the store (not
 * an outage: a write that would fail again) gives the batch up at once (`reason="error"`). A run that lost its lease
 * and still retries writes nothing once Redis answers: the mark carries its fence, which the new owner's claim moved.
 */
/** Why live events were given up (`trs_live_events_dropped_total{reason}`, besides the relay's `buffer_full`). */
export type DropReason = 'outage' | 'error';

export class LiveNews {
  /** `<fence>:<random>`: a write under it lands only while the run's lease fence is the session's (event-mark.lua). */
  readonly token: string;
  /** The number of the next event (from 1). */
  private next = 1;
  private tail: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: SessionStore,
    private readonly id: string,
    fence: number,
    private readonly giveUpAfterMs: number,
    /** True once the run has stopped (cancel, lost lease, shutdown, delete): nothing is tried again. */
    private readonly stopped: () => boolean,
    /** Told of the events of each batch given up. */
    readonly onDropped: (n: number, reason: DropReason) => void,
  ) {
    this.token = `${fence}:${randomBytes(6).toString('hex')}`;
  }

  /** Numbers for `n` events about to be written (by the stream relay, whose batches are its own). */
  take(n: number): EventMark {
    const mark = { token: this.token, first: this.next };
    this.next += n;
    return mark;
  }

  /** Writes `events` after everything sent before them; its failures are handled here (never rejects). */
  send(events: Array<[string, string]>): void {
    if (events.length === 0) return;
    const mark = this.take(events.length);
    this.tail = this.tail.then(() => this.writeThrough(events, mark));
  }

  /** Settles once everything sent so far is written or given up. */
  idle(): Promise<void> {
    return this.tail;
  }

  /** Writes one batch, again (same numbers) after each failure of the store, until it lands or is given up. */
  async writeThrough(events: Array<[string, string]>, mark: EventMark): Promise<void> {
    const deadline = Date.now() + this.giveUpAfterMs;
    for (let attempt = 0; ; attempt++) {
      try {
        await this.store.appendEvents(this.id, events, mark);
        return;
      } catch (err) {
        const wait = retryDelayMs(attempt);
        const outage = err instanceof StoreUnavailable;
        if (!outage || this.stopped() || Date.now() + wait > deadline) {
          this.onDropped(events.length, outage ? 'outage' : 'error');
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }
}

/** Wait before attempt `attempt + 1` of a failed write (ms): 100, 200, 400, then 800 at most. */
export function retryDelayMs(attempt: number): number {
  return Math.min(800, 100 * 2 ** attempt);
}
