/**
 * What `Api.waitFor` waits on between reads of a session: its SSE stream (`GET /v1/sessions/:id/events`,
 * `Accept: text/event-stream`), followed from the start of the log, so a change made before the stream was
 * connected is replayed, not missed. Each batch of bytes the stream delivers (events, the opening `retry:` line, a
 * heartbeat, its end) says "read the session again"; a batch that arrives while a read is on its way makes the next
 * wait return at once. A lost or refused stream is reconnected (after the last event id it delivered), with a
 * backoff up to 1 s; the caller's own fallback poll covers the gap.
 */

const BACKOFF_MS = [50, 100, 200, 400, 1000];

export class SessionChanges {
  private pending = false;
  private wake: (() => void) | null = null;
  private readonly stop = new AbortController();
  private lastId: string | undefined;

  constructor(
    private readonly base: string,
    private readonly token: string | undefined,
    private readonly id: string,
  ) {
    void this.follow();
  }

  /** Forgets the batches seen so far: called just before a read of the session, which sees what they changed. */
  clear(): void {
    this.pending = false;
  }

  /** Resolves once a batch arrived since `clear()`, or after `ms` (the fallback poll). */
  next(ms: number): Promise<void> {
    if (this.pending || this.stop.signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  close(): void {
    this.stop.abort();
    this.notify();
  }

  private notify(): void {
    this.pending = true;
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  private async follow(): Promise<void> {
    const { signal } = this.stop;
    for (let failures = 0; !signal.aborted; failures++) {
      try {
        if (await this.readStream(signal)) failures = 0;
      } catch {
        /* aborted, or the service is away (a replica stopped): reconnect below, or stop */
      }
      if (signal.aborted) return;
      this.notify();
      const delay = BACKOFF_MS[Math.min(failures, BACKOFF_MS.length - 1)]!;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
      });
    }
  }

  /** One connection of the stream, read to its end; true when it was accepted (200). */
  private async readStream(signal: AbortSignal): Promise<boolean> {
    const res = await fetch(`${this.base}/v1/sessions/${encodeURIComponent(this.id)}/events`, {
      headers: {
        accept: 'text/event-stream',
        ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        ...(this.lastId ? { 'last-event-id': this.lastId } : {}),
      },
      signal,
    });
    if (!res.ok || !res.body) {
      await res.body?.cancel();
      return false;
    }
    const decoder = new TextDecoder();
    let partial = '';
    for await (const chunk of res.body) {
      const lines = (partial + decoder.decode(chunk, { stream: true })).split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        if (line.startsWith('id: ')) this.lastId = line.slice(4);
        // The log was trimmed past the cursor: the next connection replays what is retained.
        else if (line.startsWith('data: ') && line.includes('"cursor_expired"')) this.lastId = undefined;
      }
      this.notify();
    }
    return true;
  }
}
