/**
 * A three-level sub-agent tree driven from the root's event stream alone (spec §7.6, "approvals of a child surface
 * on the parent"): writer → researcher → fetcher, whose `get_weather` call waits for an approval. The client
 * follows only the writer over WebSocket; the writer's `children.waiting` events name the fetcher and its call, the
 * client approves it by REST, a later `children.waiting` tells that nothing waits any more, and the tree completes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { connectWs, type Envelope } from '../fixtures/event-clients.js';
import { defineLuaCommands } from '../../src/store/lua-commands.js';
import '../../src/agents/lua/commands.js';
import { agentTool, writerResearcherFetcher } from '../helpers/agents.js';

describe('sub-agents: the parent tells what its descendants wait for', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let h: Harness;
  let a: Api;
  let r: Redis;

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    fake.setHandler(writerResearcherFetcher);
    h = await startHarness({
      env: { API_KEYS: 'a:key-a', AGENT_SWEEP_MS: '50' },
      redis,
      fakeServer: fake,
    });
    a = h.api.as('key-a');
    r = new Redis(redis.url);
  });
  after(async () => {
    r.disconnect();
    await h.close();
    await fake.close();
    await redis.stop();
  });

  it("a grandchild's approval is driven from the root's WebSocket alone", async () => {
    const fetcher = agentTool('fetcher', {
      system: 'You are a fetcher.',
      tools: ['get_weather'],
      approval: 'always',
    });
    const researcher = agentTool('researcher', { system: 'You are a researcher.', tools: [fetcher] });
    const root = await a.post('/v1/sessions', {
      system: 'You are a writer.',
      input: 'Write about the weather.',
      tools: [researcher],
      start: false,
    });
    assert.equal(root.status, 201, JSON.stringify(root.body));
    const ws = await connectWs(h.service.url, root.body.id, { token: 'key-a' });
    try {
      assert.ok((await a.post(`/v1/sessions/${root.body.id}/messages`, { content: 'Go.' })).status < 300);
      const told = (e: Envelope) => e.type === 'children.waiting';
      const waits = await ws.waitEvent(
        (e) => told(e) && e.data.children_waiting.length > 0,
        'children.waiting naming the waiting grandchild',
        30_000,
      );
      // The root names its child (the researcher), which names its own (the fetcher) and the call to approve.
      const [child] = waits.data.children_waiting;
      assert.equal(child.required_action.type, 'submit_tool_results');
      assert.equal(child.required_action.tool_calls[0].name, 'fetcher');
      const [grandchild] = child.required_action.children_waiting;
      assert.equal(grandchild.required_action.type, 'approve_tool_calls');
      const call = grandchild.required_action.tool_calls[0];
      assert.equal(call.name, 'get_weather');
      assert.equal(waits.revision, null);
      // It is what the root's GET shows.
      const got = (await a.get(`/v1/sessions/${root.body.id}`)).body;
      assert.deepEqual(got.required_action.children_waiting, waits.data.children_waiting);

      const decided = await a.post(`/v1/sessions/${grandchild.session_id}/tool-calls/${call.id}`, {
        decision: 'approve',
      });
      assert.equal(decided.status, 202, JSON.stringify(decided.body));
      const after = (e: Envelope) => ws.events.items.indexOf(e) > ws.events.items.indexOf(waits);
      await ws.waitEvent(
        (e) => e.type === 'session.status' && e.data.status === 'idle' && after(e),
        'the root idle',
        30_000,
      );
      const all = ws.events.items;
      const cleared = all.findIndex((e) => told(e) && e.data.children_waiting.length === 0);
      assert.ok(cleared > all.indexOf(waits), 'a children.waiting with nothing waiting follows the approval');
      // One event per change: the waiting list was told once, and cleared once.
      assert.equal(all.filter(told).length, 2, JSON.stringify(all.filter(told).map((e) => e.data)));
      const last = (await a.get(`/v1/sessions/${root.body.id}/messages`)).body.data.at(-1);
      assert.match(JSON.stringify(last.content), /Article: a sunny day/);
      assert.equal((await a.get(`/v1/sessions/${grandchild.session_id}`)).body.status, 'idle');
      // The log holds what the stream gave (durable, not only live).
      const logged = (await a.get(`/v1/sessions/${root.body.id}/events?limit=1000`)).body.data;
      assert.equal(logged.filter(told).length, 2);
    } finally {
      ws.close();
    }
  });

  it('children-waiting-2.lua writes one event per change of the list, none for a gone session', async () => {
    defineLuaCommands(r, new URL('../../src/agents/lua/', import.meta.url), 'agents');
    await r.hset('s:{cw}', 'status', 'requires_action');
    const tell = (fp: string, session = 'cw') =>
      r.agentsChildrenWaiting(
        `s:{${session}}`,
        `s:{${session}}:e`,
        fp,
        `{"fp":"${fp}"}`,
        'ev:{cw}',
        100,
        1,
        16384,
        1e6,
      );
    // A retry of the same look (another replica, a sweep after a crash) writes nothing more.
    assert.deepEqual(
      [await tell(''), await tell('f1'), await tell('f1'), await tell(''), await tell('')],
      [0, 1, 0, 1, 0],
    );
    const logged = await r.xrange('s:{cw}:e', '-', '+');
    assert.deepEqual(
      logged.map(([, f]) => [f[1], f[3]]),
      [
        ['children.waiting', '{"fp":"f1"}'],
        ['children.waiting', '{"fp":""}'],
      ],
    );
    assert.equal(await tell('f2', 'gone'), 0);
    assert.equal(await r.exists('s:{gone}:e'), 0);
  });
});

describe('sub-agents and the quotas', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let h: Harness;

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    fake.setHandler(writerResearcherFetcher);
    h = await startHarness({
      env: {
        API_KEYS: 'a:key-a',
        AGENT_SWEEP_MS: '50',
        TENANT_MAX_ACTIVE_RUNS: '1',
        TENANT_MAX_SESSIONS: '2',
      },
      redis,
      fakeServer: fake,
    });
  });
  after(async () => {
    await h.close();
    await fake.close();
    await redis.stop();
  });

  it('a waiting parent holds no run slot; its child counts in TENANT_MAX_SESSIONS', async () => {
    const a = h.api.as('key-a');
    const researcher = agentTool('researcher', { system: 'You are a researcher.' });
    const root = await a.post('/v1/sessions', {
      system: 'You are a writer.',
      input: 'Write.',
      tools: [researcher],
    });
    assert.equal(root.status, 201, JSON.stringify(root.body));
    const done = await a.waitFor(root.body.id, (s) => s.status === 'idle', 30_000);
    assert.equal(done.stop_reason, 'end_turn');
    // With one run slot for the tenant, the child ran while its parent waited: its text is the result, no error.
    const history = (await a.get(`/v1/sessions/${root.body.id}/messages`)).body.data;
    const result = history
      .flatMap((m: { content: unknown }) => (Array.isArray(m.content) ? m.content : []))
      .find((b: { type: string }) => b.type === 'tool_result');
    assert.equal(result.is_error ?? false, false, JSON.stringify(result));
    assert.match(JSON.stringify(result.content), /Findings: it is sunny/);
    const children = (await a.get(`/v1/sessions/${root.body.id}/children`)).body.data;
    assert.equal(children.length, 1);
    // The parent and its child are the tenant's 2 sessions: a third is refused.
    const third = await a.post('/v1/sessions', { input: 'x', start: false });
    assert.equal(third.status, 429);
    assert.equal(third.body.error.details.quota, 'TENANT_MAX_SESSIONS');
  });
});
