/**
 * Run leases with replicas whose clocks disagree: `ahead` runs with its Date.now() 10 minutes ahead of Redis's clock,
 * `behind` 10 minutes behind (test/helpers/clock-skew.ts). The lease itself is a key with Redis's expiry; when a run
 * is due for the other replicas' sweep (`runs:due`) is Redis's clock too (run-due-set-1.lua, run-due-read-1.lua), so
 * - a live run is never taken over by a replica ahead (its turn is sent once, no `turn.dropped`);
 * - a run handed over by a replica ahead (SIGTERM) is resumed by another at once, and one left by its crash once its
 *   lease lapsed: with the replica's own clock in `runs:due`, both were due for the others 20 minutes later.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { clockSkewArgs } from '../helpers/clock-skew.js';
import {
  LoopModel,
  leaseOwnerPid,
  redisClient,
  storedHistory,
  tagged,
  until,
  verifyLoopHistory,
} from './chaos-lib.js';

const SKEW_MS = 10 * 60_000;
/** Long beside a sweep (1 s), so that a resume well before it can only come from the hand-over. */
const LEASE_TTL_MS = 6000;
const GRACE_MS = 500;

describe('run leases with replicas whose clocks are off', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let fake: FakeAnthropic;
  const procs = new Map<'ahead' | 'behind', ServiceProcess>();

  const start = async (name: 'ahead' | 'behind') => {
    const p = await spawnService(
      serviceEnv(redis.url, fake.url, {
        LEASE_TTL_MS: String(LEASE_TTL_MS),
        SHUTDOWN_GRACE_MS: String(GRACE_MS),
        CLOCK_SKEW_MS: String(name === 'ahead' ? SKEW_MS : -SKEW_MS),
      }),
      { name, nodeArgs: clockSkewArgs() },
    );
    procs.set(name, p);
    return p;
  };
  const ensure = async () => {
    for (const name of ['ahead', 'behind'] as const) if (!procs.get(name)?.running()) await start(name);
    return { ahead: procs.get('ahead')!, behind: procs.get('behind')! };
  };
  /** Creates a loop session on `on` and checks that `on` runs it. */
  const createOn = async (on: ServiceProcess, tag: string, model: LoopModel) => {
    const res = await on.api.post('/v1/sessions', {
      input: tagged(tag),
      tools: ['calculate_sum'],
      max_iterations: 50,
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const id = res.body.id as string;
    assert.equal(await until(() => leaseOwnerPid(r, id), 5000, 'the lease'), on.pid);
    await until(() => model.requestsOf(tag).length >= 1, 10_000, 'the first turn');
    return id;
  };
  const eventTypes = async (id: string) =>
    (await r.xrange(`s:{${id}}:e`, '-', '+')).map(([, f]) => {
      for (let i = 0; i + 1 < f.length; i += 2) if (f[i] === 't') return f[i + 1];
      return '';
    });

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    r = redisClient(redis.url);
  });
  after(async () => {
    await Promise.all([...procs.values()].map((p) => p.kill()));
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });

  it('a replica ahead does not take over a live run of one behind: each turn is sent once', async () => {
    const { behind } = await ensure();
    // Turns of about a second each, over several lease renewals and sweeps of the replica ahead.
    const model = new LoopModel({ turns: 5, eventDelayMs: 150 });
    fake.setHandler(model.handler);
    const id = await createOn(behind, 'live', model);
    const done = await behind.api.waitStatus(id, ['idle', 'failed'], 60_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(model.requestsOf('live').length, 5, 'each turn sent upstream once');
    const types = await eventTypes(id);
    assert.equal(types.filter((t) => t === 'turn.dropped').length, 0);
    assert.deepEqual(verifyLoopHistory(await storedHistory(r, id), model, 'live').problems, []);
  });

  it("a replica ahead's hand-over is resumed at once by one behind", async () => {
    const { ahead, behind } = await ensure();
    const model = new LoopModel({ turns: 12, eventDelayMs: 40 });
    fake.setHandler(model.handler);
    const id = await createOn(ahead, 'handover', model);
    await until(() => model.requestsOf('handover').length >= 2, 20_000, 'the run');
    const info = await ahead.stop();
    const exitedAt = Date.now();
    assert.equal(info.code, 0, JSON.stringify(info));
    // Due now of Redis's clock: the replica behind takes over within a sweep, not 20 minutes later.
    const pid = await until(() => leaseOwnerPid(r, id), LEASE_TTL_MS, 'the replica behind to take over', 10);
    const ms = Date.now() - exitedAt;
    assert.equal(pid, behind.pid);
    assert.ok(ms < LEASE_TTL_MS / 2, `taken over ${ms} ms after the exit (lease TTL ${LEASE_TTL_MS} ms)`);
    const done = await behind.api.waitStatus(id, ['idle', 'failed'], 60_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual(verifyLoopHistory(await storedHistory(r, id), model, 'handover').problems, []);
  });

  it('the run of a replica ahead that crashed is taken over by one behind once its lease lapsed', async () => {
    const { ahead, behind } = await ensure();
    const model = new LoopModel({ turns: 12, eventDelayMs: 40 });
    fake.setHandler(model.handler);
    const id = await createOn(ahead, 'crash', model);
    await until(() => model.requestsOf('crash').length >= 2, 20_000, 'the run');
    await ahead.kill();
    const killedAt = Date.now();
    const pid = await until(
      async () => {
        const p = await leaseOwnerPid(r, id);
        return p === behind.pid ? p : null;
      },
      LEASE_TTL_MS + 10_000,
      'the replica behind to take over',
    );
    const ms = Date.now() - killedAt;
    assert.equal(pid, behind.pid);
    assert.ok(ms < LEASE_TTL_MS + 5000, `taken over ${ms} ms after the crash (lease TTL ${LEASE_TTL_MS} ms)`);
    const done = await behind.api.waitStatus(id, ['idle', 'failed'], 60_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual(verifyLoopHistory(await storedHistory(r, id), model, 'crash').problems, []);
  });
});
