/**
 * A sub-agent tree across a crash: the replica that created the child is SIGKILLed while the child's turn is in
 * flight (after the child's creation, before the parent's result commit). Another replica takes the child's run
 * over, the child's end wakes the parent there, and there is exactly one child.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { until } from '../durability/chaos-lib.js';
import { writerResearcher, writerWithResearcher } from '../helpers/agents.js';

describe('sub-agents across a SIGKILL', { timeout: 180_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let procs: ServiceProcess[] = [];
  let open: () => void = () => {};
  const gate = new Promise<void>((resolve) => (open = resolve));

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    // The researcher's turns wait for the gate: the child is created and running when the replica dies.
    fake.setHandler(async (req) => {
      if (JSON.stringify(req.body.system ?? '').includes('researcher')) await gate;
      return writerResearcher(req);
    });
    const env = serviceEnv(redis.url, fake.url, { API_KEYS: 'a:key-a', AGENT_SWEEP_MS: '100' });
    procs = await Promise.all([0, 1].map((i) => spawnService(env, { name: `rep${i}` })));
  });
  after(async () => {
    open();
    await Promise.all(procs.map((p) => p.kill()));
    await fake.close();
    await redis.stop();
  });

  it('creates one child, and the parent finishes on the other replica', async () => {
    const api = procs[0]!.api.as('key-a');
    const p = (await api.post('/v1/sessions', writerWithResearcher)).body;
    const child = await until(
      async () => (await api.get(`/v1/sessions/${p.id}/children`)).body.data?.[0],
      30_000,
      'the child',
    );
    const creator = await until(
      () =>
        procs.find((x) => x.logs().some((l) => l['msg'] === 'sub-agent started' && l['child'] === child.id)),
      10_000,
      'the replica that created the child',
    );
    await creator.kill();
    open();
    const other = procs.find((x) => x !== creator)!.api.as('key-a');
    const done = await other.waitFor(p.id, (s) => s.status === 'idle', 60_000);
    assert.equal(done.stop_reason, 'end_turn');
    const last = (await other.get(`/v1/sessions/${p.id}/messages`)).body.data.at(-1);
    assert.match(JSON.stringify(last.content), /Findings: Rayleigh/);
    const children = (await other.get(`/v1/sessions/${p.id}/children`)).body.data;
    assert.equal(children.length, 1);
    const all = (await other.get('/v1/sessions?limit=100')).body.data;
    assert.equal(
      all.length,
      2,
      `the parent and one child, nothing else: listed ${JSON.stringify(all.map((s: { id: string; created_at: string }) => [s.id, s.created_at]))}, parent ${p.id}, child ${child.id}`,
    );
  });
});
