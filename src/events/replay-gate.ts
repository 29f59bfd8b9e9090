/**
 * Bounds on the replays of the event streams (WebSocket, SSE), per tenant and per process: a tenant's replaying
 * readers take turns, so they cannot monopolise Redis (every read of a page is one script, and Redis runs a script
 * alone: 500 events of a large log took 11–13 ms, during which every tenant's commands waited) nor grow the
 * process's memory with pages held for readers that do not read (contract §5).
 *
 * - **pages**: a replaying reader holds a tenant's page place from the read of its page until its transport took
 *   the whole page (it waits for its socket to drain with the place held): at most REPLAY_PAGES_PER_TENANT pages of
 *   one tenant are in memory at once in a process, whatever the number of its streams. Its other readers wait in
 *   the tenant's line (FIFO), holding nothing but their connection.
 * - **reads**: the script that reads a page is run with a read place of its tenant (REPLAY_READS_PER_TENANT) and one
 *   of the process (REPLAY_READS_PER_PROCESS), both held only while Redis answers: a tenant has at most that many
 *   page reads queued on the shared Redis connection, ahead of everyone else's commands.
 *
 * The live tail (readers caught up with their session, fed from the notices) and the JSON pages take no place.
 */
import { Line } from '../line.js';

/** Pages of one tenant's replays held at once in one process (read, and not yet all taken by their socket). */
export const REPLAY_PAGES_PER_TENANT = 16;
/** Page reads of one tenant's replays in flight at once in one process. */
export const REPLAY_READS_PER_TENANT = 4;
/** Page reads of replays in flight at once in one process, all tenants together. */
export const REPLAY_READS_PER_PROCESS = 8;

export interface ReplayLimits {
  pagesPerTenant: number;
  readsPerTenant: number;
  readsPerProcess: number;
}

/** A holder of a page place: its wait is cancelled when it closes. */
export interface Waiter {
  /** Set while it waits for a page place: cancels the wait (the promise resolves false). */
  cancelWait: (() => void) | null;
}

interface TenantLines {
  pages: Line;
  reads: Line;
}

/** One per hub (per process). */
export class ReplayGate {
  private readonly tenants = new Map<string, TenantLines>();
  private readonly processReads: Line;

  constructor(private readonly limits: ReplayLimits) {
    this.processReads = new Line(limits.readsPerProcess);
  }

  private lines(tenant: string): TenantLines {
    let t = this.tenants.get(tenant);
    if (!t) {
      t = { pages: new Line(this.limits.pagesPerTenant), reads: new Line(this.limits.readsPerTenant) };
      this.tenants.set(tenant, t);
    }
    return t;
  }

  private forget(tenant: string): void {
    const t = this.tenants.get(tenant);
    if (t && t.pages.idle && t.reads.idle) this.tenants.delete(tenant);
  }

  /**
   * A page place of `tenant`'s: true at once, or a promise of true once its turn comes; false (no place held) when
   * `w` closed while it waited. A place taken is given back with `leavePage`.
   */
  enterPage(tenant: string, w: Waiter): true | Promise<boolean> {
    const line = this.lines(tenant).pages;
    let resolve!: (ok: boolean) => void;
    const go = () => {
      w.cancelWait = null;
      resolve(true);
    };
    if (line.enter(go)) return true;
    return new Promise<boolean>((r) => {
      resolve = r;
      w.cancelWait = () => {
        w.cancelWait = null;
        line.cancel(go);
        this.forget(tenant);
        r(false);
      };
    });
  }

  leavePage(tenant: string): void {
    this.tenants.get(tenant)?.pages.leave();
    this.forget(tenant);
  }

  /** Runs `read` (one page read from Redis) with a read place of `tenant`'s and one of the process's. */
  async read<T>(tenant: string, read: () => Promise<T>): Promise<T> {
    const lines = this.lines(tenant);
    await take(lines.reads);
    try {
      await take(this.processReads);
      try {
        return await read();
      } finally {
        this.processReads.leave();
      }
    } finally {
      lines.reads.leave();
      this.forget(tenant);
    }
  }

  /** Places held and entries waiting, per tenant and for the process's reads (metrics, tests). */
  counts(): {
    tenants: Map<string, { pages: number; pagesQueued: number; reads: number }>;
    reads: number;
    readsQueued: number;
  } {
    const tenants = new Map<string, { pages: number; pagesQueued: number; reads: number }>();
    for (const [tenant, t] of this.tenants)
      tenants.set(tenant, { pages: t.pages.held, pagesQueued: t.pages.queued, reads: t.reads.held });
    return { tenants, reads: this.processReads.held, readsQueued: this.processReads.queued };
  }
}

/** A place of `line`, at once or in turn (the reads are short: their wait is not cancelled). */
function take(line: Line): Promise<void> | void {
  // Set before the callback can run: a place handed on later, from another read's leave().
  let resolve = () => {};
  if (line.enter(() => resolve())) return;
  return new Promise<void>((r) => (resolve = r));
}
