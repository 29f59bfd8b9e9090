/**
 * A sub-agent deleted before it ended counts what it spent toward its parent, and what its own sub-agents still at
 * work spent too: the sweep deletes those after it, when its meta hash is gone and nothing can be added to it, so
 * deleting a middle child would otherwise get round the root's budget.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { until } from '../durability/chaos-lib.js';
import { agentTool, writerResearcherFetcher } from '../helpers/agents.js';

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
