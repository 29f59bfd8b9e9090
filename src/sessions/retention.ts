/**
 * Retention (§7.4, policy `ttl_s`, default SESSION_TTL_S): an idle or failed session not changed for `ttl_s` is
 * deleted with every key, its tenant index entry and what other features keep for it (the store's `destroyHooks`),
 * after a `session.deleted` event (`"reason": "expired"`; webhooks get it as for a DELETE). Any replica sweeps the due
 * set `sessions:expiry` (src/store/due.ts): an entry is written when the session is created (or its `ttl_s` changed)
 * and moved on to `updated_at + ttl_s` whenever the sweep finds the session changed since. The delete is guarded by
 * the revision the sweep read (destroy-11.lua), so a new message that lands first wins and the TTL starts again.
 * Every time here is of Redis's clock: `updated_at` is its TIME (apply-8.lua), entries are written `ttl_s` from its
 * now (due-add-1.lua) and read and compared by its now (due-read-1.lua). With the sweeping replica's own clock, one
 * ahead deleted every tenant's sessions early by its skew; with the writer's, one ahead wrote entries late.
 */
import type { EngineLogger } from '../engine/run-handle.js';
import type { DueEntry } from '../store/due.js';
import type { SessionStore } from '../store/store.js';
import { SweepLoop } from '../sweep-loop.js';
import { FailureLog } from '../log.js';

export class RetentionSweeper {
  private readonly loop: SweepLoop;

  constructor(
    private readonly store: SessionStore,
    private readonly log: EngineLogger,
    private readonly intervalMs: number,
  ) {
    this.loop = new SweepLoop(() => this.sweep(), intervalMs, new FailureLog(log, 'the retention sweep'));
  }

  start(): void {
    this.loop.start(this.intervalMs);
  }

  stop(): Promise<void> {
    return this.loop.stop();
  }

  /**
   * One pass: the entries due by Redis's now, each session's expiry compared with it (due-read-1.lua: the read the
   * pass made with ZRANGEBYSCORE, no round trip added). The now read also sets this process's reckoning of Redis's
   * clock (`store.clock`), as the deadline sweep's does.
   */
  async sweep(): Promise<void> {
    const { store } = this;
    const sent = Date.now();
    // A failed read fails the pass: the loop logs it once per outage.
    const { now, entries } = await store.expiryDue.dueNow(100);
    store.clock.observe(now, sent);
    for (const e of entries) {
      await this.one(e, now).catch((err: unknown) =>
        this.log.warn({ err, session: e.id }, 'session expiry failed'),
      );
    }
    // The index entries and the storage bytes of deletes (these, and DELETEs) whose process died right after their
    // script.
    await store.sweepDeletes(now);
  }

  private async one(e: DueEntry, now: number): Promise<void> {
    const s = await this.store.load(e.id);
    if (!s || !s.ttlS) {
      await this.store.expiryDue.settle(e, null);
      return;
    }
    const ttlMs = s.ttlS * 1000;
    const expires = (s.updatedAt || s.createdAt) + ttlMs;
    // Running or waiting for a client: not deleted; looked at again a TTL from now.
    if (s.status !== 'idle' && s.status !== 'failed') {
      await this.store.expiryDue.settle(e, now + ttlMs);
      return;
    }
    if (now < expires) {
      await this.store.expiryDue.settle(e, expires);
      return;
    }
    // A sub-agent expired before its parent's sweep delivered it: what it spent counts toward the parent all the
    // same (once per child, child-usage-1.lua; counted first, so a crash after the delete cannot lose it), as a
    // DELETE's does. An idle or failed child has no children at work (its end cancelled them).
    if (s.parent) await this.store.addChildUsage(s.parent.session_id, s);
    const deleted = await this.store.destroy(s.id, s.tenant, s.createdAt, {
      revision: s.revision,
      reason: 'expired',
      ttlMs: this.store.options.deletedLogTtlMs ?? 60_000,
      // Its entries in the metadata index go with it, as a DELETE's do.
      metadata: s.metadata,
    });
    // Not deleted: a write came first; the next pass reads it again.
    if (!deleted) return;
    // Its parent, if it still waits for it, is answered "deleted" by the agents' sweep now, not at its next look.
    if (s.parent)
      await this.store.runs.trees
        .wake(s.parent.session_id, s.tenant)
        .catch((err: unknown) => this.log.warn({ err, session: s.id }, 'sub-agent tree not woken'));
    this.log.info({ session: s.id, tenant: s.tenant }, 'session expired and deleted');
  }
}
