/**
 * The bytes one tenant's event streams (WebSockets, SSE, chat streams) hold queued for their clients in this
 * process. Each stream is held to WS_MAX_BUFFER_BYTES by its sink; without a bound per tenant, TENANT_MAX_STREAMS
 * readers that stop reading hold that many times as much (1,000 × 1 MiB). Past TENANT_MAX_STREAM_BUFFERED_BYTES, the
 * tenant's streams holding the most (each BEHIND bytes or more) are cut as slow readers, the largest first, until
 * the total is back under: readers that stopped reading hold the most, as their queues only grow, whether or not
 * their session still sends anything; a reader that keeps up holds a batch or two for a moment.
 *
 * The total is kept by difference (each reader's last count is remembered), so noting costs no scan. A count only
 * changes when something is written to its reader, so the bytes a client read since are still counted: before
 * cutting, the tenant's queues are read again (at most once per REFRESH_MS per tenant), so a cut is decided on
 * current bytes. Readers of one session share each event's bytes (one Buffer per event per process) but each is
 * counted whole: the bound errs on the side of cutting early, never late. Bytes in the kernel's socket buffers
 * are not the process's and are not counted.
 */

/** A stream with fewer bytes than this queued is never cut for its tenant's total. */
const BEHIND = 64 * 1024;
/** Least time (ms) between two recounts of one tenant's readers: a recount reads every reader's queue. */
const REFRESH_MS = 100;

/** One reader's part in its tenant's total. */
export interface HeldBytes {
  /** The bytes this reader was last counted with (0 until counted). */
  held: number;
  /** Its transport's queued bytes now. */
  buffered(): number;
  /** Ends it as a slow reader; it `forget`s itself. */
  cut(): void;
}

interface Ledger {
  total: number;
  readers: Set<HeldBytes>;
  /** When the counts were last read again (Date.now(), ms). */
  recountedAt: number;
}

export class TenantBuffers {
  private readonly tenants = new Map<string, Ledger>();

  /** `limit`: bytes per tenant (TENANT_MAX_STREAM_BUFFERED_BYTES); 0 or less: no bound. */
  constructor(private readonly limit: number) {}

  /** Whether a bound applies (else nothing need be noted). */
  get bounded(): boolean {
    return this.limit > 0;
  }

  /**
   * `reader` of `tenant`'s now holds `bytes` queued; over the bound, the tenant's largest holders are cut (this
   * reader among them, perhaps). A reader with nothing queued before or now costs one comparison.
   */
  note(tenant: string, reader: HeldBytes, bytes: number): void {
    if (this.limit <= 0 || (bytes === 0 && reader.held === 0)) return;
    let ledger = this.tenants.get(tenant);
    if (!ledger) {
      ledger = { total: 0, readers: new Set(), recountedAt: 0 };
      this.tenants.set(tenant, ledger);
    }
    ledger.total += bytes - reader.held;
    reader.held = bytes;
    if (bytes === 0) ledger.readers.delete(reader);
    else ledger.readers.add(reader);
    if (ledger.total > this.limit) {
      const now = Date.now();
      if (now - ledger.recountedAt >= REFRESH_MS) {
        ledger.recountedAt = now;
        this.recount(ledger);
      }
      if (ledger.total > this.limit) this.cutLargest(ledger);
    }
    if (ledger.readers.size === 0) this.tenants.delete(tenant);
  }

  /** `reader` ended: its bytes no longer count. */
  forget(tenant: string, reader: HeldBytes): void {
    if (reader.held === 0) return;
    const ledger = this.tenants.get(tenant);
    if (ledger?.readers.delete(reader)) {
      ledger.total -= reader.held;
      if (ledger.readers.size === 0) this.tenants.delete(tenant);
    }
    reader.held = 0;
  }

  /** The bytes `tenant`'s readers were last counted with (for tests and metrics). */
  total(tenant: string): number {
    return this.tenants.get(tenant)?.total ?? 0;
  }

  private cutLargest(ledger: Ledger): void {
    const behind = [...ledger.readers].filter((r) => r.held >= BEHIND).sort((a, b) => b.held - a.held);
    for (const r of behind) {
      if (ledger.total <= this.limit) return;
      r.cut();
      // A reader that did not forget itself (ended already) leaves the count all the same.
      if (ledger.readers.delete(r)) {
        ledger.total -= r.held;
        r.held = 0;
      }
    }
  }

  private recount(ledger: Ledger): void {
    let total = 0;
    for (const r of ledger.readers) {
      r.held = r.buffered();
      total += r.held;
      if (r.held === 0) ledger.readers.delete(r);
    }
    ledger.total = total;
  }
}
