/**
 * The storage quota's settle sweep (TENANT_MAX_BYTES, src/store/storage-quota.ts): every replica, every
 * OWED_SWEEP_MS, pays or drops the owed records of session deletes killed between their script and giving their
 * bytes back. Any number of replicas may sweep at once: a record is paid once (owed-pay-2.lua).
 */
import type { EngineLogger } from '../engine/run-handle.js';
import { FailureLog } from '../log.js';
import { OWED_SWEEP_MS } from '../store/storage-quota.js';
import type { SessionStore } from '../store/store.js';
import { SweepLoop } from '../sweep-loop.js';

export class OwedSweeper {
  private readonly loop: SweepLoop;

  constructor(
    private readonly store: SessionStore,
    log: EngineLogger,
    private readonly intervalMs = OWED_SWEEP_MS,
  ) {
    this.loop = new SweepLoop(() => this.sweep(), intervalMs, new FailureLog(log, 'the storage quota sweep'));
  }

  start(): void {
    this.loop.start(this.intervalMs);
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  async sweep(): Promise<void> {
    await this.store.settleOwed();
  }
}
