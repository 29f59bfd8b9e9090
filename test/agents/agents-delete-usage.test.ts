/**
 * A sub-agent deleted before it ended counts what it spent toward its parent, and what its own sub-agents still at
 * work spent too: the sweep deletes those after it, when its meta hash is gone and nothing can be added to it, so
 * deleting a middle child would otherwise get round the root's budget. So does a child deleted by retention (its
 * `ttl_s`) before its parent's sweep delivered it, and that parent, parked, is told at once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { until } from '../durability/chaos-lib.js';
import { RetentionSweeper } from '../../src/sessions/retention.js';
import { treeDueKey } from '../../src/store/tree-due.js';
import { sessionKeys } from '../../src/store/keys.js';
import { childrenKey } from '../../src/agents/sweep.js';
import { EXPIRY_DUE_KEY } from '../../src/store/due.js';
import {
  agentTool,
  harnessWithoutSweep,
  writerResearcherFetcher,
  writerWithResearcher,
  drivenSweep,
} from '../helpers/agents.js';

describe('child usage: a deleted middle child', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let h: Harness;
  let a: Api;
  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    fake.setHandler(writerResearcherFetcher);
    h = await startHarness({ env: { API_KEYS: 'a:key-a', AGENT_SWEEP_MS: '50' }, redis, fakeServer: fake });
    a = h.api.as('key-a');
  });
  after(async () => {
    await h.close();
    await fake.close();
    await redis.stop();
  });

  it("the grandchild's spend reaches the root when the middle child is deleted", async () => {
    const fetcher = agentTool('fetcher', {
      system: 'You are a fetcher.',
      tools: ['get_weather'],
      approval: 'always',
    });
    const researcher = agentTool('researcher', { system: 'You are a researcher.', tools: [fetcher] });
    const root = (
      await a.post('/v1/sessions', { system: 'You are a writer.', input: 'Weather?', tools: [researcher] })
    ).body;
    const child = await until(
      async () => (await a.get(`/v1/sessions/${root.id}/children`)).body.data[0],
      20_000,
      'the researcher',
    );
    const grandchild = await until(
      async () => (await a.get(`/v1/sessions/${child.id}/children`)).body.data[0],
      20_000,
      'the fetcher',
    );
    const g = await a.waitStatus(grandchild.id, 'requires_action', 20_000);
    const c = await a.waitStatus(child.id, 'requires_action', 20_000);
    assert.ok(g.usage.total_tokens > 0 && c.usage.total_tokens > 0);
    assert.equal((await a.req('DELETE', `/v1/sessions/${child.id}`)).status, 200);
    // The sweep deletes the grandchild after it.
    await until(
      async () => ((await a.get(`/v1/sessions/${grandchild.id}`)).status === 404 ? true : null),
      20_000,
      'the grandchild deleted',
    );
    await a.waitFor(root.id, (s) => s.status !== 'running' && s.status !== 'requires_action', 30_000);
    const after = (await a.get(`/v1/sessions/${root.id}`)).body;
    assert.equal(
      after.usage.children.total_tokens,
      c.usage.total_tokens + g.usage.total_tokens,
      `root counts its child (${c.usage.total_tokens}) and grandchild (${g.usage.total_tokens})`,
    );
  });
});

describe('child usage: a child expired (ttl_s) before its parent was told', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  before(async () => {
    // The service's own agents' sweep stays out: this test's sweep looks when it says.
    h = await harnessWithoutSweep();
    a = h.api.as('key-a');
  });
  after(() => h.close());

  it("the child's spend reaches its parent, which is answered at once", async () => {
    const { app } = h.service;
    const { pass } = drivenSweep(app);
    const researcher = {
      ...writerWithResearcher.tools[0]!,
      session: { system: 'You are a researcher.', ttl_s: 60 },
    };
    const parent = (await a.post('/v1/sessions', { ...writerWithResearcher, tools: [researcher] })).body;
    await a.waitStatus(parent.id, 'requires_action', 20_000);
    // The run's end wakes the parent after the status a client sees: passes until one has looked at it.
    const childId: string = await until(
      async () => {
        await pass();
        return (await app.redis.zrange(childrenKey(parent.id), 0, -1))[0] ?? null;
      },
      20_000,
      'the child created',
    );
    const child = await a.waitStatus(childId, 'idle', 20_000);
    assert.ok(child.usage.total_tokens > 0);
    // The parent parked (a look put its next a minute away) and not told yet; then the child expires.
    await app.redis.zadd(treeDueKey('a'), 'XX', Date.now() + 60_000, parent.id);
    // Its TTL over: its last change a TTL and a second ago, its expiry entry due (the sweep reads by Redis's clock).
    const aged = Date.now() - (child.ttl_s + 1) * 1000;
    await app.redis.hset(sessionKeys(childId).meta, 'updated_at', aged);
    await app.redis.zadd(EXPIRY_DUE_KEY, aged, childId);
    const retention = new RetentionSweeper(app.store, app.log, 3_600_000);
    await retention.sweep();
    assert.equal((await a.get(`/v1/sessions/${childId}`)).status, 404, 'the child expired');
    assert.equal(
      (await a.get(`/v1/sessions/${parent.id}`)).body.usage.children.total_tokens,
      child.usage.total_tokens,
    );
    assert.ok(
      Number(await app.redis.zscore(treeDueKey('a'), parent.id)) < Date.now() + 1,
      'the parent woken',
    );
    await pass();
    const done = await a.waitStatus(parent.id, 'idle', 20_000);
    assert.equal(done.usage.children.total_tokens, child.usage.total_tokens, 'counted once');
    const history = (await a.get(`/v1/sessions/${parent.id}/messages`)).body.data;
    assert.match(JSON.stringify(history[2].content), /deleted/);
  });
});
