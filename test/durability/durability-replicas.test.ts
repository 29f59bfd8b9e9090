/**
 * Several replicas on one Redis: any request to any replica, one run per session at a time (lease + fencing token),
 * cancel and delete sent to one replica reach the run on another within a second (pub/sub).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { hang, startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import {
  LoopModel,
  leaseOwnerPid,
  redisClient,
  storedHistory,
  tagged,
  until,
  startLoop,
  verifyLoopHistory,
} from './chaos-lib.js';

const LEASE_TTL_MS = 2000;

describe('several replicas on one Redis', { timeout: 180_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let fake: FakeAnthropic;
  let procs: ServiceProcess[] = [];

  const start = (name: string) =>
    spawnService(serviceEnv(redis.url, fake.url, { LEASE_TTL_MS: String(LEASE_TTL_MS) }), { name });
  const ensure = async (n: number) => {
    procs = procs.filter((p) => p.running());
    const missing = n - procs.length;
    if (missing > 0)
      procs.push(...(await Promise.all(Array.from({ length: missing }, (_, i) => start(`rep${i}`)))));
  };

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    r = redisClient(redis.url);
    await ensure(3);
  });
  after(async () => {
    await Promise.all(procs.map((p) => (p.resume(), p.kill())));
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });

  /** The replica running the session, and another one. */
  async function ownerAndOther(id: string) {
    const pid = await until(() => leaseOwnerPid(r, id), 5000, 'a lease holder');
    const owner = procs.find((p) => p.pid === pid)!;
    assert.ok(owner, 'the lease holder is one of the replicas');
    return { owner, other: procs.find((p) => p !== owner && p.running())! };
  }

  it('serves any request about any session on any replica', async () => {
    await ensure(3);
    const model = new LoopModel({ turns: 3 });
    fake.setHandler(model.handler);
    const [a, b, c] = procs as [ServiceProcess, ServiceProcess, ServiceProcess];
    const created = await a.api.post('/v1/sessions', {
      input: tagged('anyreplica'),
      tools: ['calculate_sum'],
      metadata: { who: 'a' },
    });
    assert.equal(created.status, 201);
    const id = created.body.id as string;
    const idle = await b.api.waitStatus(id, 'idle', 30_000);
    assert.equal(idle.iteration, 3);
    const fromC = await c.api.get(`/v1/sessions/${id}`);
    assert.equal(fromC.status, 200);
    assert.equal(fromC.body.revision, idle.revision);
    const listed = await c.api.get('/v1/sessions?limit=50');
    assert.ok(listed.body.data.some((s: any) => s.id === id));
    const patched = await b.api.req('PATCH', `/v1/sessions/${id}`, { metadata: { who: 'b' } });
    assert.equal(patched.status, 200);
    assert.deepEqual((await a.api.get(`/v1/sessions/${id}`)).body.metadata, { who: 'b' });
    // A follow-up on C runs (on whichever replica) to idle; the events log reads the same on every replica.
    const more = await c.api.post(`/v1/sessions/${id}/messages`, { text: 'Once more.' });
    assert.equal(more.status, 202);
    const again = await a.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 4, 30_000);
    const evA = (await a.api.get(`/v1/sessions/${id}/events?limit=1000`)).body;
    const evB = (await b.api.get(`/v1/sessions/${id}/events?limit=1000`)).body;
    assert.deepEqual(evA, evB);
    const history = (await b.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.equal(history.length, 8);
    assert.equal(history[6].content[0].text, 'Once more.');
    assert.equal(again.message_count, 8);
    assert.equal((await c.api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal((await a.api.get(`/v1/sessions/${id}`)).status, 404);
  });

  it('runs each session once at a time: replicas race for orphaned runs, exactly one wins', async () => {
    await ensure(3);
    const model = new LoopModel({ turns: 6, eventDelayMs: 25 });
    fake.setHandler(model.handler);
    const tags = Array.from({ length: 9 }, (_, i) => `race${i}`);
    const ids = await Promise.all(
      tags.map(async (tag, i) => {
        const res = await procs[i % 3]!.api.post('/v1/sessions', {
          input: tagged(tag),
          tools: ['calculate_sum'],
        });
        assert.equal(res.status, 201);
        return res.body.id as string;
      }),
    );
    await until(() => tags.every((t) => model.requestsOf(t).length >= 2), 30_000, 'every session to run');
    // Kill the replica that runs the most sessions: the other two race for its runs.
    const pids = await Promise.all(ids.map((id) => leaseOwnerPid(r, id)));
    const victim = procs
      .map((p) => ({ p, n: pids.filter((x) => x === p.pid).length }))
      .sort((x, y) => y.n - x.n)[0]!.p;
    await victim.kill();
    // Taken once the victim has exited: a request it sent just before dying may reach the fake after a clock read
    // made before the kill (seen on a loaded machine), and would look like a second runner asking the same turn.
    const killedAt = Date.now();
    const survivor = procs.find((p) => p.running())!;
    await Promise.all(ids.map((id) => survivor.api.waitStatus(id, ['idle', 'failed'], 40_000)));
    for (const [i, id] of ids.entries()) {
      const s = (await survivor.api.get(`/v1/sessions/${id}`)).body;
      assert.equal(s.status, 'idle', JSON.stringify(s.error));
      const history = await storedHistory(r, id);
      const verdict = verifyLoopHistory(history, model, tags[i]!);
      assert.deepEqual(verdict.problems, [], tags[i]);
      // After the kill each turn was asked at most once: two runners would ask the same turn twice.
      const turnsAfter = model
        .requestsOf(tags[i]!, killedAt)
        .map((q) => q.messages.filter((m) => m.role === 'assistant').length);
      assert.equal(
        new Set(turnsAfter).size,
        turnsAfter.length,
        `${tags[i]} turns after the kill: ${turnsAfter}`,
      );
    }
  });

  it('fences out a frozen replica: its late commit is refused, the history has no duplicate', async () => {
    await ensure(3);
    const model = new LoopModel({ turns: 4, eventDelayMs: 40 });
    fake.setHandler(model.handler);
    const tag = 'frozen';
    const id = await startLoop(procs[0]!.api, model, tag);
    const { owner, other } = await ownerAndOther(id);
    const fenceBefore = Number(await r.hget(`s:{${id}}`, 'fence'));
    owner.pause();
    const pausedAt = Date.now();
    try {
      // Its lease expires; another replica takes the run over with a new fencing token and finishes it.
      await until(
        async () => Number(await r.hget(`s:{${id}}`, 'fence')) > fenceBefore,
        LEASE_TTL_MS + 8000,
        'another replica to take over',
      );
      const done = await other.api.waitStatus(id, ['idle', 'failed'], 30_000);
      assert.equal(done.status, 'idle');
    } finally {
      owner.resume();
    }
    // The frozen one wakes up with its turn's reply in its socket buffer, tries to commit it, and its run ends.
    await owner.waitForLog((l) => l['msg'] === 'run ended' && l['session'] === id, 15_000);
    const s = (await other.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'idle');
    assert.equal(s.iteration, 4);
    const history = await storedHistory(r, id);
    assert.deepEqual(verifyLoopHistory(history, model, tag).problems, []);
    assert.ok(owner.running(), 'the woken replica lives on');
    assert.ok(Date.now() - pausedAt > LEASE_TTL_MS);
  });

  for (const what of ['cancel', 'delete'] as const) {
    it(`${what} sent to one replica reaches the run on another within a second`, async () => {
      await ensure(3);
      fake.reset();
      fake.setHandler(() => hang());
      const created = await procs[0]!.api.post('/v1/sessions', { input: `hang for ${what}` });
      const id = created.body.id as string;
      await until(() => fake.requests.length === 1, 5000, 'the upstream call');
      const { owner, other } = await ownerAndOther(id);
      assert.equal((await owner.api.get('/readyz')).body.active_runs, 1);
      const t0 = Date.now();
      if (what === 'cancel') {
        const res = await other.api.post(`/v1/sessions/${id}/cancel`);
        const ms = Date.now() - t0;
        assert.equal(res.status, 200, JSON.stringify(res.body));
        assert.equal(res.body.status, 'idle');
        assert.equal(res.body.stop_reason, 'cancelled');
        assert.ok(ms < 1000, `cancelled in ${ms} ms`);
      } else {
        const res = await other.api.req('DELETE', `/v1/sessions/${id}`);
        assert.equal(res.status, 200);
      }
      // The owner's run ended (its upstream call aborted) within the second.
      await until(
        async () => (await owner.api.get('/readyz')).body.active_runs === 0,
        1000,
        'the run to stop',
      );
      const ms = Date.now() - t0;
      assert.ok(ms < 1000, `${what} reached the owner in ${ms} ms`);
      if (what === 'delete') {
        // The run's last line: it writes nothing after it.
        await owner.waitForLog((l) => l['msg'] === 'run ended' && l['session'] === id, 5000);
        // Nothing of the session came back (no late write of the aborted run); the event log expires, and with it
        // the tenant it belonged to (`:g`, for a follower resuming after the delete).
        const keys = (await r.keys(`s:{${id}}*`)).sort();
        assert.deepEqual(keys, [`s:{${id}}:e`, `s:{${id}}:g`]);
        for (const k of keys) assert.ok((await r.pttl(k)) > 0, k);
        assert.equal((await owner.api.get(`/v1/sessions/${id}`)).status, 404);
      }
      console.log(`# ${what} via another replica: run stopped after ${ms} ms`);
      fake.setHandler(null);
    });
  }
});
