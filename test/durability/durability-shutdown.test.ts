/**
 * Graceful shutdown: SIGTERM stops taking runs, lets turns finish within SHUTDOWN_GRACE_MS, then releases the leases
 * of the runs still going and marks them due, so another replica resumes them at once — long before the lease TTL.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { TEST_TOOLS_MODULE } from '../helpers/test-tools.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import {
  LoopModel,
  leaseOwnerPid,
  redisClient,
  storedHistory,
  tagged,
  until,
  verifyLoopHistory,
} from './chaos-lib.js';

/** Long, so that a resume "well before the lease TTL" can only come from the hand-over. */
const LEASE_TTL_MS = 15_000;
const GRACE_MS = 1500;

describe('graceful shutdown (SIGTERM)', { timeout: 180_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let fake: FakeAnthropic;
  let toolLog: string;
  let procs: ServiceProcess[] = [];

  const start = (name: string) =>
    spawnService(
      serviceEnv(redis.url, fake.url, {
        LEASE_TTL_MS: String(LEASE_TTL_MS),
        SHUTDOWN_GRACE_MS: String(GRACE_MS),
        SERVER_TOOLS_MODULE: TEST_TOOLS_MODULE,
        TEST_TOOLS_LOG: toolLog,
      }),
      { name },
    );
  const ensureTwo = async () => {
    procs = procs.filter((p) => p.running());
    while (procs.length < 2) procs.push(await start(`sd${procs.length}`));
  };
  /** Creates a session on the first process and returns it with the process that runs it. */
  const createOn = async (body: Record<string, unknown>) => {
    const res = await procs[0]!.api.post('/v1/sessions', body);
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const id = res.body.id as string;
    const pid = await until(() => leaseOwnerPid(r, id), 5000, 'the lease');
    const owner = procs.find((p) => p.pid === pid)!;
    return { id, owner, other: procs.find((p) => p !== owner)! };
  };

  before(async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-shutdown-'));
    toolLog = path.join(dir, 'tools.log');
    await writeFile(toolLog, '');
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    r = redisClient(redis.url);
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });

  it('lets a turn in flight finish within the grace period, then exits 0', async () => {
    await ensureTwo();
    // One slow final turn (~1 s), shorter than the grace period.
    const model = new LoopModel({ turns: 1, eventDelayMs: 100 });
    fake.setHandler(model.handler);
    const { id, owner } = await createOn({ input: tagged('finish') });
    await until(() => model.requestsOf('finish').length === 1, 5000, 'the turn');
    const t0 = Date.now();
    const exit = owner.stop();
    // It stops taking requests at once.
    await until(
      async () => {
        try {
          await fetch(`${owner.url}/healthz`);
          return false;
        } catch {
          return true;
        }
      },
      2000,
      'the listener to close',
    );
    const info = await exit;
    const ms = Date.now() - t0;
    assert.equal(info.code, 0, JSON.stringify(info));
    assert.ok(ms < GRACE_MS + 2000, `exited after ${ms} ms`);
    const s = await r.hgetall(`s:{${id}}`);
    assert.equal(s['status'], 'idle', 'the turn finished and was committed by the process shutting down');
    assert.equal(model.requestsOf('finish').length, 1, 'not sent again');
    assert.equal(await r.get(`s:{${id}}:l`), null);
  });

  it('hands runs still going after the grace period to another replica at once', async () => {
    await ensureTwo();
    const model = new LoopModel({ turns: 12, eventDelayMs: 40 });
    fake.setHandler(model.handler);
    const { id, owner, other } = await createOn({
      input: tagged('handover'),
      tools: ['calculate_sum'],
      max_iterations: 50,
    });
    await until(() => model.requestsOf('handover').length >= 2, 20_000, 'the run');
    const t0 = Date.now();
    const info = await owner.stop();
    const exitedAt = Date.now();
    assert.equal(info.code, 0, JSON.stringify(info));
    assert.ok(exitedAt - t0 < GRACE_MS + 3000, `exited after ${exitedAt - t0} ms`);
    const atExit = await storedHistory(r, id);
    // The other replica takes over within a sweep, not after the lease TTL.
    const pid = await until(() => leaseOwnerPid(r, id), LEASE_TTL_MS, 'the other replica to take over', 10);
    const handoverMs = Date.now() - exitedAt;
    assert.equal(pid, other.pid);
    assert.ok(handoverMs < 2500, `taken over ${handoverMs} ms after the exit (lease TTL ${LEASE_TTL_MS} ms)`);
    const done = await other.api.waitStatus(id, ['idle', 'failed'], 40_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const history = await storedHistory(r, id);
    assert.deepEqual(verifyLoopHistory(history, model, 'handover').problems, []);
    assert.deepEqual(history.slice(0, atExit.length), atExit);
    console.log(
      `# shutdown hand-over: exit ${exitedAt - t0} ms after SIGTERM, resumed ${handoverMs} ms after exit`,
    );
  });

  it('hands over a tool still running after the grace period: an idempotent tool runs again elsewhere', async () => {
    await ensureTwo();
    const model = new LoopModel({
      turns: 2,
      call: () => ({ name: 'sleep_idempotent', input: { ms: GRACE_MS + 2500 } }),
    });
    fake.setHandler(model.handler);
    const { id, owner, other } = await createOn({ input: tagged('toolsd'), tools: ['sleep_idempotent'] });
    const callId = await until(() => model.sent.find((s) => s.tag === 'toolsd')?.key, 5000, 'the call');
    await until(async () => (await readFile(toolLog, 'utf8')).includes(`start ${callId}`), 5000, 'the tool');
    const info = await owner.stop();
    assert.equal(info.code, 0, JSON.stringify(info));
    const done = await other.api.waitStatus(id, ['idle', 'failed'], 40_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const history = await storedHistory(r, id);
    // Idempotent calls are committed with their reply, so the handed-over turn was sent again and its new call ran
    // to completion on the other replica; the cut-off call left nothing in the history.
    const use = (history[1]!.content as any[]).find((b) => b.type === 'tool_use');
    assert.notEqual(use.id, callId);
    const result = (history[2]!.content as any[])[0];
    assert.equal(result.is_error, undefined, `the tool ran again to completion: ${JSON.stringify(result)}`);
    const log = (await readFile(toolLog, 'utf8')).split('\n');
    const runs = (call: string) =>
      log.filter((l) => l.includes(` ${call} `)).map((l) => l.split(' ')[0] + ' ' + l.split(' ')[2]);
    assert.deepEqual(runs(callId), [`start ${owner.pid}`]);
    assert.deepEqual(runs(use.id), [`start ${other.pid}`, `end ${other.pid}`]);
  });
});
