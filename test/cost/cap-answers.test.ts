import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall } from '../fake/script.js';
import { checkHistory } from '../../src/history.js';

/**
 * TENANT_MAX_COST_USD_PER_DAY and the step a run waits on (contract §7.4: checked before each model request; over it
 * the run stops after the turn's tool results, and new runs are refused). The turn that takes the tenant over its cap
 * may end waiting for its client — a review (`pause_after_turn`, `review_tool_results`), a decision, a client
 * tool's result: the answer lands, the step's calls run, and the run stops before its next model request with
 * `tenant_budget_exhausted`. What starts a new run is refused with 429 `quota_exceeded`.
 */
describe("cost: answers to a waiting step over the tenant's daily cap", () => {
  let h: Harness;
  // Each test crosses the cap of a tenant of its own: $0.015 on claude-sonnet-5-5, over the $0.01 cap.
  const spend = { input_tokens: 1000, output_tokens: 1300 };
  const model = 'claude-sonnet-5-5';
  const lookup = {
    name: 'lookup',
    description: 'Looks up',
    input_schema: { type: 'object', properties: {} },
  };
  before(async () => {
    h = await startHarness({
      env: {
        API_KEYS: 'a:key-a,b:key-b,c:key-c,d:key-d,e:key-e,f:key-f',
        TENANT_MAX_COST_USD_PER_DAY: '0.01',
      },
    });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  /** A session of tenant `key` whose first turn (calling `calculate_sum`, id `toolu_<key>`) crosses the cap. */
  async function crossing(
    key: string,
    body: Record<string, unknown>,
    call = toolCall('calculate_sum', { a: 1, b: 2 }, { id: `toolu_${key}`, usage: spend }),
  ) {
    const api = h.api.as(key);
    h.fake.enqueue(call, text('Never sent.', { usage: spend }));
    const r = await api.post('/v1/sessions', { model, tools: ['calculate_sum'], input: 'Add', ...body });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await api.waitStatus(r.body.id, ['requires_action', 'idle', 'failed']);
    return { api, s };
  }

  /** The run went on with the step and stopped before its next model request; the history ends with the results. */
  async function stoppedAfterResults(api: Harness['api'], id: string, content: RegExp) {
    const done = await api.waitStatus(id, ['idle', 'failed']);
    assert.deepEqual([done.status, done.stop_reason], ['idle', 'tenant_budget_exhausted']);
    assert.equal(h.fake.requests.length, 1, 'no model request after the turn that crossed the cap');
    const msgs = (await api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.equal(msgs.at(-1).role, 'user');
    assert.equal(msgs.at(-1).content[0].type, 'tool_result');
    assert.match(JSON.stringify(msgs.at(-1).content[0].content), content);
    assert.deepEqual(checkHistory(msgs), []);
  }

  function assertCapRefusal(r: { status: number; body: any }, what: string) {
    assert.equal(r.status, 429, `${what}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.error.code, 'quota_exceeded');
    assert.equal(r.body.error.details.quota, 'cost_usd_per_day');
  }

  it('pause_after_turn: continue accepts the reply that crossed the cap, its call runs; new runs are refused', async () => {
    const { api, s } = await crossing('key-a', { pause_after_turn: true });
    assert.equal(s.required_action?.type, 'review_turn');
    const c = await api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    await stoppedAfterResults(api, s.id, /^"3"$/);
    // Stopped by the cap: what would start a new run is refused.
    assertCapRefusal(await api.post(`/v1/sessions/${s.id}/continue`), 'continue of the idle session');
    assertCapRefusal(await api.post(`/v1/sessions/${s.id}/messages`, { text: 'More' }), 'a message');
    assertCapRefusal(await api.post(`/v1/sessions/${s.id}/retry`), 'retry');
    assertCapRefusal(await api.post('/v1/sessions', { model, input: 'Hi' }), 'create');
    const made = await api.post('/v1/sessions', { model, input: 'Hi', start: false });
    assert.equal(made.status, 201, 'a session not started starts no run');
    assert.equal(h.fake.requests.length, 1);
  });

  it('approval: approve and deny of the calls of the turn that crossed the cap are accepted', async () => {
    const approved = await crossing('key-b', { approval: 'always' });
    assert.equal(approved.s.required_action?.type, 'approve_tool_calls');
    const a = await approved.api.post(`/v1/sessions/${approved.s.id}/tool-calls/toolu_key-b`, {
      decision: 'approve',
    });
    assert.equal(a.status, 202, JSON.stringify(a.body));
    await stoppedAfterResults(approved.api, approved.s.id, /^"3"$/);

    h.fake.reset();
    const denied = await crossing('key-c', { approval: 'always' });
    const d = await denied.api.post(`/v1/sessions/${denied.s.id}/tool-calls/toolu_key-c`, {
      decision: 'deny',
      reason: 'no',
    });
    assert.equal(d.status, 202, JSON.stringify(d.body));
    await stoppedAfterResults(denied.api, denied.s.id, /denied/i);
  });

  it("a client tool's result of the turn that crossed the cap is accepted", async () => {
    const { api, s } = await crossing(
      'key-d',
      { tools: [lookup] },
      toolCall('lookup', {}, { id: 'toolu_key-d', usage: spend }),
    );
    assert.equal(s.required_action?.type, 'submit_tool_results');
    const r = await api.req('PUT', `/v1/sessions/${s.id}/tool-results/toolu_key-d`, { content: 'found' });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    await stoppedAfterResults(api, s.id, /found/);
  });

  it('review_tool_results: continue accepts the results of the turn that crossed the cap', async () => {
    const { api, s } = await crossing('key-e', { review_tool_results: true });
    assert.equal(s.required_action?.type, 'review_tool_results');
    const c = await api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    await stoppedAfterResults(api, s.id, /^"3"$/);
  });

  it('resume of a session that failed is a new run: refused over the cap', async () => {
    const { api, s } = await crossing(
      'key-f',
      { tools: ['get_weather'], on_tool_error: 'fail' },
      toolCall('get_weather', { location: 42 }, { id: 'toolu_key-f', usage: spend }),
    );
    assert.deepEqual([s.status, s.error?.code], ['failed', 'tool_failed']);
    assertCapRefusal(await api.post(`/v1/sessions/${s.id}/resume`), 'resume');
    assert.equal((await api.get(`/v1/sessions/${s.id}`)).body.status, 'failed');
    assert.equal(h.fake.requests.length, 1);
  });
});
