/**
 * Writes batched over one turn of the event loop: every `add` for a key in that turn waits for one write of them all
 * (`write`, called from `setImmediate`), which settles them all. Concurrent runs of one tenant each add their turn's
 * usage and bytes after their commit; under load, many such commits complete in the same turn (their replies arrive
 * in one read of the socket), so one command carries them instead of one each.
 *
 * What an awaited `add` means does not change: its item was written (or the write failed, and every `add` of the
 * batch rejects). A crash before the write loses the batch's items, as it lost the one command each before.
 */
export class KeyedBatch<T> {
  private readonly pending = new Map<string, { items: T[]; done: Promise<void> }>();

  constructor(private readonly write: (key: string, items: readonly T[]) => Promise<unknown>) {}

  /** Adds `item` to `key`'s batch; resolves once the batch is written. */
  add(key: string, item: T): Promise<void> {
    let batch = this.pending.get(key);
    if (!batch) {
      const items: T[] = [];
      const done = new Promise<void>((resolve, reject) => {
        setImmediate(() => {
          // Adds after this point start the next batch.
          this.pending.delete(key);
          // A write that throws at once (not a rejected promise) rejects the batch too, never this callback.
          let written: Promise<unknown>;
          try {
            written = this.write(key, items);
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
            return;
          }
          written.then(() => resolve(), reject);
        });
      });
      batch = { items, done };
      this.pending.set(key, batch);
    }
    batch.items.push(item);
    return batch.done;
  }
}

/**
 * Increments of a key's Redis counters, batched over one turn of the event loop (KeyedBatch): one write of their
 * sums per key. The counters these are (bytes) may undercount on a crash, never count twice.
 */
export class CounterBatch {
  private readonly batch: KeyedBatch<Iterable<readonly [string, number]>>;

  constructor(write: (key: string, sums: ReadonlyMap<string, number>) => Promise<unknown>) {
    this.batch = new KeyedBatch((key, incrs) => {
      const sums = new Map<string, number>();
      for (const incr of incrs)
        for (const [field, n] of incr) if (n) sums.set(field, (sums.get(field) ?? 0) + n);
      return write(key, sums);
    });
  }

  /** Adds `incr` (field, increment; zeros skipped) to `key`'s batch; resolves once the batch is written. */
  add(key: string, incr: Iterable<readonly [string, number]>): Promise<void> {
    return this.batch.add(key, [...incr]);
  }
}
