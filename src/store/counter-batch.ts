/**
 * Increments of a key's Redis counters, batched over one turn of the event loop: every `add` for a key in that turn
 * waits for one write of their sums (`write`, called from `setImmediate`), which settles them all. Concurrent runs of
 * one tenant each add their turn's usage and bytes after their commit; under load, many such commits complete in
 * the same turn (their replies arrive in one read of the socket), so one command carries them instead of one each.
 *
 * What an awaited `add` means does not change: its increment was written (or the write failed, and every `add` of
 * the batch rejects). A crash before the write loses the batch's increments, as it lost the one command each
 * before: the counters these are (usage, bytes) may undercount on a crash, never count twice.
 */
export class CounterBatch {
  private readonly pending = new Map<string, { sums: Map<string, number>; done: Promise<void> }>();

  constructor(private readonly write: (key: string, sums: ReadonlyMap<string, number>) => Promise<unknown>) {}

  /** Adds `incr` (field, increment; zeros skipped) to `key`'s batch; resolves once the batch is written. */
  add(key: string, incr: Iterable<readonly [string, number]>): Promise<void> {
    let batch = this.pending.get(key);
    if (!batch) {
      const sums = new Map<string, number>();
      const done = new Promise<void>((resolve, reject) => {
        setImmediate(() => {
          // Adds after this point start the next batch.
          this.pending.delete(key);
          // A write that throws at once (not a rejected promise) rejects the batch too, never this callback.
          let written: Promise<unknown>;
          try {
            written = this.write(key, sums);
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
            return;
          }
          written.then(() => resolve(), reject);
        });
      });
      batch = { sums, done };
      this.pending.set(key, batch);
    }
    for (const [field, n] of incr) if (n) batch.sums.set(field, (batch.sums.get(field) ?? 0) + n);
    return batch.done;
  }
}
