/**
 * The bytes one tenant's event streams (WebSockets, SSE, chat streams) hold queued for their clients in this
 * process. Each stream is held to WS_MAX_BUFFER_BYTES by its sink; without a bound per tenant, TENANT_MAX_STREAMS
 * readers that stop reading hold that many times as much (1,000 × 1 MiB). Past TENANT_MAX_STREAM_BUFFERED_BYTES,
 * the tenant's streams that hold at least their share of the bound (and BEHIND bytes or more) are cut as slow
 * readers when an event is next written to them. Whenever the total is over, the stream holding the most holds at
 * least that share, so the total comes back under; a stream whose client keeps up (a batch or two in its socket) is
 * never cut for its neighbours.
 *
 * The total is kept by difference (each reader's last count is remembered), so noting costs no scan. A count only
 * changes when an event is written, so the bytes a client read since then are still counted: the total can only be
 * high, never low. Before cutting, the tenant's counts are read again (at most once per REFRESH_MS per tenant), so a
 * cut is decided on current bytes.
 */

/** A stream with this many bytes queued or more is behind: it may be cut when its tenant is over its bound. */
const BEHIND = 64 * 1024;
/** Least time (ms) between two recounts of one tenant's readers: a recount reads every reader's queue. */
const REFRESH_MS = 100;

/** One reader's part in its tenant's total. */
export interface HeldBytes {
  /** The bytes this reader was last counted with (0 until counted). */
  held: number;
  /** Its transport's queued bytes now. */
  buffered(): number;
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

  /**
   * `reader` of `tenant`'s now holds `bytes` queued. True when it must be cut: its tenant is over the bound and it
   * holds its share of it or more. A reader with nothing queued before or now costs one comparison.
   */
  note(tenant: string, reader: HeldBytes, bytes: number): boolean {
    if (this.limit <= 0 || (bytes === 0 && reader.held === 0)) return false;
    let ledger = this.tenants.get(tenant);
    if (!ledger) {
      ledger = { total: 0, readers: new Set(), recountedAt: 0 };
      this.tenants.set(tenant, ledger);
    }
    ledger.total += bytes - reader.held;
    reader.held = bytes;
    if (bytes === 0) ledger.readers.delete(reader);
    else ledger.readers.add(reader);
    if (bytes < BEHIND || ledger.total <= this.limit) return this.keep(tenant, ledger);
    const now = Date.now();
    if (now - ledger.recountedAt >= REFRESH_MS) {
      ledger.recountedAt = now;
      this.recount(ledger);
    }
    return ledger.total > this.limit && reader.held >= this.limit / ledger.readers.size;
  }

  /** `reader` ended: its bytes no longer count. */
  forget(tenant: string, reader: HeldBytes): void {
    if (reader.held === 0) return;
    const ledger = this.tenants.get(tenant);
    if (ledger?.readers.delete(reader)) {
      ledger.total -= reader.held;
      this.keep(tenant, ledger);
    }
    reader.held = 0;
  }

  /** The bytes `tenant`'s readers were last counted with (for tests and metrics). */
  total(tenant: string): number {
    return this.tenants.get(tenant)?.total ?? 0;
  }

  /** Drops a tenant none of whose readers holds anything; false (keep the reader). */
  private keep(tenant: string, ledger: Ledger): false {
    if (ledger.readers.size === 0) this.tenants.delete(tenant);
    return false;
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
