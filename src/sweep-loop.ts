import type { FailureLog } from './log.js';

/**
 * A sweep every replica runs on a timer (due runs, deadlines, retention, schedules, sub-agents): one pass at a
 * time, the next `intervalMs` after the last one ended (a slow pass never overlaps the next), a failed pass logged
 * (once per outage: FailureLog) and the loop kept. The writes of a pass are guarded in Redis, so any number of replicas may sweep at once.
 * `stop()` ends the loop and waits for the pass in flight.
 */
export class SweepLoop {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private pass: Promise<void> = Promise.resolve();

  constructor(
    private readonly sweep: () => Promise<void>,
    private readonly intervalMs: number,
    private readonly failures: FailureLog,
  ) {}

  /** Starts the loop; the first pass comes after `firstMs` (at most 50 ms by default). */
  start(firstMs = Math.min(50, this.intervalMs)): void {
    this.stopped = false;
    const loop = () => {
      this.pass = this.sweep()
        .then(
          () => this.failures.ok(),
          (err: unknown) => this.failures.failed(err),
        )
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(loop, this.intervalMs).unref();
        });
    };
    this.timer = setTimeout(loop, firstMs).unref();
  }

  /** True once `stop()` was called: a pass checks it between items. */
  get stopping(): boolean {
    return this.stopped;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.pass;
  }
}
