import type { SessionStore } from '../store/store.js';

/**
 * Relays a turn's stream events to the event log as they arrive: a batch is written at once when no write is in
 * flight, and what arrives meanwhile is written as the next batch when that write returns (at most `maxEvents` per
 * pipeline). So an event waits at most one round trip, and a fast stream costs one round trip per batch, not per event.
 * One write at a time keeps the log in the events' order.
 *
 * The buffer is bounded (MAX_BUFFERED events): while a write is slower than the stream (Redis busy, a huge turn of
 * tiny deltas), events past the bound are dropped rather than held — live clients miss some deltas, the turn's
 * reply is whole in the history and in `turn.completed`, and memory stays bounded whatever the upstream sends.
 */
/** Events a relay holds unwritten at most. */
const MAX_BUFFERED = 4096;

export class StreamRelay {
  private buf: Array<[string, string]>;
  /** Events dropped at the bound (see above). */
  dropped = 0;
  private writing: Promise<void> | null = null;
  private scheduled: NodeJS.Immediate | null = null;

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
    if (this.store.isCluster) await this.writing;
    return rest;
  }
}
