/**
 * A run's last commit makes its session `idle` and releases its lease in one write; its `end`, which drops the run's
 * due entry, comes after. A message posted in between, on any replica, starts the next run at once: its due entry
 * (`RunQueue.start`, before its write) and the due time its run's claim keeps may land before that late end. Dropped
 * then, the next run's replica dying before its next heartbeat would leave nothing to claim the session, `running` for
 * good. The run's end drops the entry only while it holds the due time the run itself set last (src/store/runs.ts
 * `HeldRun.due`, run-due-drop-1.lua). Here with RunQueue alone on a private Redis, each order that matters; the
 * session's fields are written as the apply script writes them (status, revision, lease).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { HeldRun } from '../../src/store/runs.js';
import { sessionKeys } from '../../src/store/keys.js';
import { runQueueForSuite } from '../helpers/redis.js';

const ID = 'ses_lateend';
const DUE = 'runs:due';
const TTL_MS = 60_000;

describe("a run's late end and the next run's due entry", { timeout: 60_000 }, () => {
  const suite = runQueueForSuite();

  const meta = sessionKeys(ID).meta;

  /** The finishing run: it claimed the session and kept its due time; its last commit wrote it `idle`, lease released. */
  async function finishedRun(): Promise<HeldRun> {
    await suite.redis.hset(meta, { status: 'running', revision: '4', tenant: 'acme' });
    const claimed = await suite.runs.claim(ID, 'replica-a', TTL_MS);
    assert.ok(claimed, 'the run holds the lease');
    const run: HeldRun = { id: ID, fence: claimed.fence, tenant: 'acme' };
    await suite.runs.keep(run, TTL_MS);
    assert.equal(Number(await suite.redis.zscore(DUE, ID)), run.due);
    await suite.redis.hset(meta, { status: 'idle', revision: '5' });
    await suite.redis.del(sessionKeys(ID).lease);
    return run;
  }

  /** The message's due entry: set by Redis's clock, another time than the finishing run's (which Redis now holds). */
  async function messageStarted(): Promise<void> {
    const before = Number(await suite.redis.zscore(DUE, ID));
    await suite.runs.start('acme', ID);
    assert.notEqual(Number(await suite.redis.zscore(DUE, ID)), before);
  }

  /** The message's entry and write, then the next run's claim on replica-b and the due time it keeps. */
  async function nextRunStarted(): Promise<void> {
    await messageStarted();
    await suite.redis.hset(meta, { status: 'running', revision: '6' });
    const next = await suite.runs.claim(ID, 'replica-b', TTL_MS);
    assert.ok(next, 'the next run claims at once');
    await suite.runs.keep({ id: ID, fence: next.fence, tenant: 'acme' }, TTL_MS);
  }

  it('the next run started before the late end: its due entry stays', async () => {
    const run = await finishedRun();
    await nextRunStarted();
    await suite.runs.end(run, 'acme');
    assert.notEqual(await suite.redis.zscore(DUE, ID), null, 'due, for a takeover should replica-b die');
  });

  it("the finishing run's heartbeat after its last commit overwrote the next run's entry: the late end leaves it", async () => {
    const run = await finishedRun();
    await nextRunStarted();
    // The finishing run's timer still fires: the lease is not its own any more, but its ZADD lands.
    assert.equal(await suite.runs.heartbeat(run, 'replica-a', TTL_MS), false);
    await suite.runs.end(run, 'acme');
    assert.notEqual(await suite.redis.zscore(DUE, ID), null, 'due, for a takeover should replica-b die');
  });

  it('the message written, its run not yet claimed, before the late end: its entry stays', async () => {
    const run = await finishedRun();
    await messageStarted();
    await suite.redis.hset(meta, { status: 'running', revision: '6' });
    await suite.runs.end(run, 'acme');
    assert.notEqual(await suite.redis.zscore(DUE, ID), null);
  });

  it("the message's entry set, its write not yet made, before the late end: the entry stays for the write", async () => {
    const run = await finishedRun();
    await messageStarted();
    await suite.runs.end(run, 'acme');
    assert.notEqual(await suite.redis.zscore(DUE, ID), null);
  });

  it("a run's own end, nothing set since its own due time, drops its entry; one that never kept one, whatever is there", async () => {
    const run = await finishedRun();
    await suite.runs.end(run, 'acme');
    assert.equal(await suite.redis.zscore(DUE, ID), null);
    await suite.runs.start('acme', ID);
    await suite.runs.end({ id: ID, fence: run.fence, tenant: 'acme' }, 'acme');
    assert.equal(await suite.redis.zscore(DUE, ID), null);
  });

  it('a parked run leaves the entry of a write that made the session due while it held the lease; else drops its own', async () => {
    await suite.redis.hset(meta, { status: 'running', revision: '7', tenant: 'acme' });
    const claimed = await suite.runs.claim(ID, 'replica-a', TTL_MS);
    assert.ok(claimed, 'the run holds the lease');
    const run: HeldRun = { id: ID, fence: claimed.fence, tenant: 'acme' };
    await suite.runs.keep(run, TTL_MS);
    // A worker's result is written, then its session made due (startRun's wake): the run still holds the lease.
    await suite.runs.wake(ID);
    await suite.runs.park(run, 'acme');
    assert.notEqual(
      await suite.redis.zscore(DUE, ID),
      null,
      'due, should the run die before it sees the result',
    );
    assert.equal(run.ended, undefined, 'parked, not ended: the run may go on, its heartbeat renewing');
    await suite.runs.keep(run, TTL_MS);
    await suite.runs.park(run, 'acme');
    assert.equal(await suite.redis.zscore(DUE, ID), null, 'no result came: nothing is due until one does');
  });
});
