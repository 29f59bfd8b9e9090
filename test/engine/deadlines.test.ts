import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness, type Api } from '../helpers/service.js';
import { awaitingApproval } from '../helpers/approvals.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { DeadlineSweeper } from '../../src/sessions/deadlines.js';

/**
 * Deadlines of pending actions with the test-only floor ACTION_TIMEOUT_MIN_S=1 (the contract's floor is 10 s) and a
 * fast sweep; every wait is for an event or a state, never a sleep.
 */
const env = { ACTION_TIMEOUT_MIN_S: '1', DEADLINE_SWEEP_MS: '50' };

const count = (evs: Array<{ type: string }>, type: string) => evs.filter((e) => e.type === type).length;

/**
 * Creates a session whose first reply calls get_weather as `call` and is held for review (pause_after_turn) with a
 * 1 s deadline that fails the session; returns its id.
 */
async function reviewFailingIn1s(api: Api, fake: FakeAnthropic, call: string): Promise<string> {
  fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: call }));
  const r = await api.post('/v1/sessions', {
    input: 'Weather?',
    tools: ['get_weather'],
    pause_after_turn: true,
    action_timeout_s: 1,
    on_action_timeout: 'fail',
  });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id as string;
}

describe('action deadlines (action_timeout_s)', () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let a: Harness;
  let b: Harness;
  before(async () => {
    redis = await startTestRedis();
    fake = await startFakeAnthropic({ strictAlternation: true });
    a = await startHarness({ redis, fakeServer: fake, env });
    b = await startHarness({ redis, fakeServer: fake, env });
  });
  after(async () => {
    await a.close();
    await b.close();
    await fake.close();
    await redis.stop();
  });
  beforeEach(() => fake.reset());

  it('refuses a timeout under the floor and shows the policy', async () => {
    const bad = await a.api.post('/v1/sessions', { input: 'x', action_timeout_s: 0 });
    assert.equal(bad.status, 400);
    const ok = await a.api.post('/v1/sessions', { input: 'x', start: false, action_timeout_s: 30 });
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    assert.equal(ok.body.action_timeout_s, 30);
    assert.equal(ok.body.on_action_timeout, 'deny');
    const p = await a.api.req('PATCH', `/v1/sessions/${ok.body.id}`, { on_action_timeout: 'fail' });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.on_action_timeout, 'fail');
  });

  it('an approval that times out is denied exactly once, with two replicas and a restart in between', async () => {
    const { id, waiting } = await awaitingApproval(
      a,
      'toolu_late',
      { action_timeout_s: 2 },
      text('No weather then.'),
    );
    const expiresAt = Date.parse(waiting.required_action.expires_at);
    assert.ok(expiresAt > Date.now() && expiresAt <= Date.now() + 2000, waiting.required_action.expires_at);

    // Replica A restarts while the session waits; B sweeps meanwhile, the new A after.
    await a.close();
    a = await startHarness({ redis, fakeServer: fake, env });

    const expiring = await b.api.waitForEvent(id, 'action.expiring');
    assert.equal(expiring.data.type, 'approve_tool_calls');
    assert.deepEqual(expiring.data.tool_use_ids, ['toolu_late']);
    const timedOut = await a.api.waitForEvent(id, 'action.timed_out');
    assert.equal(timedOut.data.on_action_timeout, 'deny');
    const done = await a.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));

    const evs = await a.api.events(id);
    assert.equal(count(evs, 'action.expiring'), 1);
    assert.equal(count(evs, 'action.timed_out'), 1);
    const decided = evs.filter((e) => e.type === 'tool_call.decided');
    assert.deepEqual(
      decided.map((e) => [e.data.decision, e.data.reason]),
      [['deny', 'timed out']],
    );
    // The model was told the call was denied, once; the tool never ran.
    assert.equal(fake.requests.length, 2);
    const results = fake.requests[1]!.messages.at(-1)!.content as any[];
    assert.equal(results.length, 1);
    assert.equal(results[0].tool_use_id, 'toolu_late');
    assert.match(JSON.stringify(results[0].content), /timed out/);
    assert.equal(count(evs, 'tool.started'), 0);
    // A decision now, the session idle since, is refused as timed out (not as "nothing awaits approval"): the
    // timeout answered that call for good.
    const late = await b.api.post(`/v1/sessions/${id}/tool-calls/toolu_late`, { decision: 'approve' });
    assert.equal(late.status, 409);
    assert.equal(late.body.error.code, 'action_timed_out', JSON.stringify(late.body));
    assert.equal(late.body.error.details.expires_at, waiting.required_action.expires_at);
    assert.equal(late.body.error.details.tool_use_id, 'toolu_late');

    // A history replaced to end before that call's answer asks for it again: then its decision is taken.
    const put = await b.api.req('PUT', `/v1/sessions/${id}/messages`, {
      messages: [
        { role: 'user', content: 'Weather in Oslo?' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'toolu_late', name: 'get_weather', input: { location: 'Oslo' } }],
        },
      ],
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal((await b.api.post(`/v1/sessions/${id}/continue`)).status, 202);
    const asked = await b.api.waitStatus(id, 'requires_action');
    assert.deepEqual(
      asked.required_action.tool_calls.map((c: { id: string }) => c.id),
      ['toolu_late'],
    );
    fake.enqueue(text('Sunny.'));
    const again = await b.api.post(`/v1/sessions/${id}/tool-calls/toolu_late`, { decision: 'approve' });
    assert.equal(again.status, 202, JSON.stringify(again.body));
    assert.equal((await b.api.waitStatus(id, ['idle', 'failed'])).status, 'idle');
  });

  it('a decision racing the deadline either lands or gets 409 action_timed_out, never both', async () => {
    const n = 6;
    for (let i = 0; i < n; i++)
      fake.enqueue(toolCall('get_weather', { location: `City ${i}` }, { id: `toolu_race${i}` }));
    const created = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        a.api.post('/v1/sessions', {
          input: `Weather ${i}?`,
          tools: ['get_weather'],
          approval: 'always',
          action_timeout_s: 3,
        }),
      ),
    );
    for (const r of created) assert.equal(r.status, 201, JSON.stringify(r.body));
    const ids: string[] = created.map((r) => r.body.id);
    const sessions = await Promise.all(ids.map((id) => a.api.waitStatus(id, 'requires_action')));
    // After these, every session gets its final answer.
    for (let i = 0; i < n; i++) fake.enqueue(text('Done.'));
    // Each decision is sent at its deadline, give or take a few ms either way, to either replica.
    const answers = await Promise.all(
      sessions.map(async (s, i) => {
        const at = Date.parse(s.required_action.expires_at) + (i % 3) * 4 - 4;
        await new Promise((r) => setTimeout(r, Math.max(0, at - Date.now())));
        const api = i % 2 ? a.api : b.api;
        const call = s.required_action.tool_calls[0].id;
        return api.post(`/v1/sessions/${s.id}/tool-calls/${call}`, { decision: 'approve' });
      }),
    );
    let landed = 0;
    for (let i = 0; i < n; i++) {
      const id = ids[i]!;
      const res = answers[i]!;
      await a.api.waitStatus(id, ['idle', 'failed']);
      const evs = await a.api.events(id);
      const decided = evs.filter((e) => e.type === 'tool_call.decided');
      assert.equal(decided.length, 1, `one decision in ${id}`);
      if (res.status === 200 || res.status === 202) {
        landed++;
        assert.equal(decided[0]!.data.decision, 'approve');
        assert.equal(count(evs, 'action.timed_out'), 0, `${id}: landed, so not timed out`);
        assert.equal(count(evs, 'tool.started'), 1);
      } else {
        assert.equal(res.status, 409, JSON.stringify(res.body));
        assert.equal(res.body.error.code, 'action_timed_out');
        assert.equal(decided[0]!.data.reason, 'timed out');
        assert.equal(count(evs, 'action.timed_out'), 1);
        assert.equal(count(evs, 'tool.started'), 0);
      }
    }
    assert.ok(landed <= n);
  });

  it('client results: deny answers them as errors; fail fails the session with action_timed_out', async () => {
    const clientTool = {
      name: 'pick_color',
      description: 'Asks the user for a color',
      input_schema: { type: 'object', properties: {} },
    };
    fake.enqueue(toolCall('pick_color', {}, { id: 'toolu_c1' }), text('No color.'));
    const r = await a.api.post('/v1/sessions', { input: 'Color?', tools: [clientTool], action_timeout_s: 1 });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await a.api.waitForEvent(r.body.id, 'action.timed_out');
    await a.api.waitStatus(r.body.id, 'idle');
    const results = fake.requests[1]!.messages.at(-1)!.content as any[];
    assert.equal(results[0].is_error, true);
    assert.match(JSON.stringify(results[0].content), /Error: no result within 1 s/);
    // The client's result, once the run it started has ended: 409 action_timed_out, by REST as by PUT.
    for (const late of [
      await a.api.post(`/v1/sessions/${r.body.id}/tool-results`, {
        results: [{ tool_use_id: 'toolu_c1', content: 'red' }],
      }),
      await a.api.req('PUT', `/v1/sessions/${r.body.id}/tool-results/toolu_c1`, { content: 'red' }),
    ]) {
      assert.equal(late.status, 409, JSON.stringify(late.body));
      assert.equal(late.body.error.code, 'action_timed_out');
      assert.equal(late.body.error.details.tool_use_id, 'toolu_c1');
    }

    fake.reset();
    fake.enqueue(toolCall('pick_color', {}, { id: 'toolu_c2' }));
    const f = await a.api.post('/v1/sessions', {
      input: 'Color?',
      tools: [clientTool],
      action_timeout_s: 1,
      on_action_timeout: 'fail',
    });
    const failed = await a.api.waitStatus(f.body.id, 'failed');
    assert.equal(failed.error.code, 'action_timed_out');
    const late = await a.api.post(`/v1/sessions/${f.body.id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_c2', content: 'red' }],
    });
    assert.equal(late.status, 409);
    assert.equal(late.body.error.code, 'action_timed_out');
    // When the action expired, though the failed session waits for nothing now.
    assert.ok(Date.parse(late.body.error.details.expires_at) <= Date.now(), JSON.stringify(late.body));
  });

  it('a step waiting for an approval and a client result: each times out in turn, and a late answer to either is 409', async () => {
    const clientTool = {
      name: 'pick_color',
      description: 'Asks the user for a color',
      input_schema: { type: 'object', properties: {} },
    };
    fake.enqueue(
      toolCalls([
        toolUse('get_weather', { location: 'Oslo' }, 'toolu_mix_w'),
        toolUse('pick_color', {}, 'toolu_mix_c'),
      ]),
      text('Neither.'),
    );
    const r = await a.api.post('/v1/sessions', {
      input: 'Weather and color?',
      tools: ['get_weather', clientTool],
      approval: 'always',
      action_timeout_s: 1,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const waiting = await a.api.waitStatus(r.body.id, 'requires_action');
    assert.equal(waiting.required_action.type, 'approve_tool_calls');
    await a.api.waitForEvent(r.body.id, 'action.timed_out');
    await a.api.waitStatus(r.body.id, 'idle');
    // The approval's timeout denied it only; the client result was asked for next, with its own deadline, and that
    // timed out in its turn.
    const timeouts = (await a.api.events(r.body.id)).filter((e) => e.type === 'action.timed_out');
    assert.deepEqual(
      timeouts.map((e) => [e.data.type, e.data.tool_use_ids]),
      [
        ['approve_tool_calls', ['toolu_mix_w']],
        ['submit_tool_results', ['toolu_mix_c']],
      ],
    );
    // The first timeout's call stays refused after the second.
    const decision = await a.api.post(`/v1/sessions/${r.body.id}/tool-calls/toolu_mix_w`, {
      decision: 'approve',
    });
    const result = await a.api.post(`/v1/sessions/${r.body.id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_mix_c', content: 'red' }],
    });
    for (const [late, call] of [
      [decision, 'toolu_mix_w'],
      [result, 'toolu_mix_c'],
    ] as const) {
      assert.equal(late.status, 409, JSON.stringify(late.body));
      assert.equal(late.body.error.code, 'action_timed_out');
      assert.equal(late.body.error.details.tool_use_id, call);
    }
  });

  it('a PATCH of action_timeout_s while an action waits: the timeout tells the deadline the action had', async () => {
    const clientTool = {
      name: 'pick_color',
      description: 'Asks the user for a color',
      input_schema: { type: 'object', properties: {} },
    };
    for (const [i, patched] of [3600, null].entries()) {
      fake.reset();
      fake.enqueue(toolCall('pick_color', {}, { id: `toolu_p${i}` }), text('No color.'));
      const r = await a.api.post('/v1/sessions', {
        input: 'Color?',
        tools: [clientTool],
        action_timeout_s: 2,
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const waiting = await a.api.waitStatus(r.body.id, 'requires_action');
      // Applies from the next action on: the one waiting keeps its 2 s deadline.
      const p = await a.api.req('PATCH', `/v1/sessions/${r.body.id}`, { action_timeout_s: patched });
      assert.equal(p.status, 200, JSON.stringify(p.body));
      assert.equal(p.body.required_action.expires_at, waiting.required_action.expires_at);
      const expiring = await a.api.waitForEvent(r.body.id, 'action.expiring');
      assert.equal(expiring.data.action_timeout_s, 2);
      const timedOut = await a.api.waitForEvent(r.body.id, 'action.timed_out');
      assert.equal(timedOut.data.action_timeout_s, 2);
      await a.api.waitStatus(r.body.id, 'idle');
      const results = fake.requests[1]!.messages.at(-1)!.content as any[];
      assert.match(JSON.stringify(results[0].content), /Error: no result within 2 s/);
    }
  });

  it('a reply under review that failed its deadline: resume brings the review back, its calls do not run', async () => {
    const id = await reviewFailingIn1s(a.api, fake, 'toolu_rf');
    const failed = await a.api.waitStatus(id, ['failed', 'idle'], 15_000);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, 'action_timed_out');
    // The next review's deadline is the policy now (a PATCH applies from the next action on).
    const p = await a.api.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: 600 });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    const resumed = await a.api.post(`/v1/sessions/${id}/resume`);
    assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
    assert.equal(resumed.body.status, 'requires_action');
    assert.equal(resumed.body.error, null);
    assert.equal(resumed.body.required_action.type, 'review_turn');
    assert.equal(resumed.body.required_action.tool_calls[0].id, 'toolu_rf');
    assert.ok(Date.parse(resumed.body.required_action.expires_at) > Date.now() + 500_000);
    assert.equal(count(await a.api.events(id), 'tool.started'), 0, 'not run');
    assert.equal(fake.requests.length, 1);

    // The review goes on as before the failure: continue runs the call, the next reply is reviewed.
    fake.enqueue(text('Sunny.'));
    const c = await a.api.post(`/v1/sessions/${id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const next = await a.api.waitFor(id, (x) => x.status !== 'running' && x.iteration === 2);
    assert.equal(next.status, 'requires_action', JSON.stringify(next.error));
    assert.equal(next.required_action.type, 'review_turn');
    assert.equal(count(await a.api.events(id), 'tool.started'), 1);
  });
});

describe('action deadlines before a sweep fired them', () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let a: Harness;
  before(async () => {
    redis = await startTestRedis();
    fake = await startFakeAnthropic({ strictAlternation: true });
    // No sweep fires the deadline during the test: what answers the action after expires_at meets it unfired.
    a = await startHarness({ redis, fakeServer: fake, env: { ...env, DEADLINE_SWEEP_MS: '3600000' } });
  });
  after(async () => {
    await a.close();
    await fake.close();
    await redis.stop();
  });

  it('a message or a PUT of the history answering a reviewed turn after its deadline: 409 action_timed_out, as continue', async () => {
    const id = await reviewFailingIn1s(a.api, fake, 'toolu_rv');
    const waiting = await a.api.waitStatus(id, 'requires_action');
    assert.equal(waiting.required_action.type, 'review_turn');
    // The condition is the clock passing expires_at (no event marks it: the sweep that would is off).
    const due = Date.parse(waiting.required_action.expires_at);
    await new Promise((res) => setTimeout(res, Math.max(0, due - Date.now()) + 20));
    const late = await a.api.post(`/v1/sessions/${id}/messages`, { text: 'Skip it.' });
    assert.equal(late.status, 409, JSON.stringify(late.body));
    assert.equal(late.body.error.code, 'action_timed_out');
    const put = await a.api.req('PUT', `/v1/sessions/${id}/messages`, {
      messages: [{ role: 'user', content: 'Weather?' }],
    });
    assert.equal(put.status, 409, JSON.stringify(put.body));
    assert.equal(put.body.error.code, 'action_timed_out');
    const cont = await a.api.post(`/v1/sessions/${id}/continue`, {});
    assert.equal(cont.status, 409, JSON.stringify(cont.body));
    assert.equal(cont.body.error.code, 'action_timed_out');
    const s = (await a.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'requires_action');
    assert.equal(fake.requests.length, 1);
  });
});

describe('action deadlines over the tenant daily cap', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { ...env, TENANT_MAX_COST_USD_PER_DAY: '0.01' } });
  });
  after(async () => h?.close());

  it('the deadline still answers the calls, and the run stops before its next request', async () => {
    const clientTool = {
      name: 'pick_color',
      description: 'Asks the user for a color',
      input_schema: { type: 'object', properties: {} },
    };
    // $0.015 on claude-sonnet-5-5: the tenant is over its cap once this turn is counted.
    const usage = { input_tokens: 1000, output_tokens: 1300 };
    h.fake.enqueue(toolCall('pick_color', {}, { id: 'toolu_cap', usage }), text('Never sent.'));
    const r = await h.api.post('/v1/sessions', {
      model: 'claude-sonnet-5-5',
      input: 'Color?',
      tools: [clientTool],
      action_timeout_s: 1,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await h.api.waitForEvent(r.body.id, 'action.timed_out');
    const done = await h.api.waitStatus(r.body.id, 'idle');
    assert.equal(done.stop_reason, 'tenant_budget_exhausted');
    assert.equal(h.fake.requests.length, 1);
    const last = (await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data.at(-1);
    assert.equal(last.content[0].tool_use_id, 'toolu_cap');
    assert.match(JSON.stringify(last.content[0].content), /Error: no result within 1 s/);
  });
});

describe('a deadline answers only what its action asked for', () => {
  let h: Harness;
  /** Redis's clock (the one deadlines are written in and fired by). */
  const redisNow = async () => {
    const [sec, us] = await h.service.app.redis.time();
    return Number(sec) * 1000 + Math.floor(Number(us) / 1000);
  };
  /**
   * Fires the deadline `expiresAt` of session `id` with one pass of a deadline sweep, once Redis's clock has passed
   * it: the service's own sweep is off (DEADLINE_SWEEP_MS of an hour), so nothing fires a deadline but this, and the
   * action that follows the timed-out one (with the `action_timeout_s` PATCHed to an hour meanwhile) cannot time
   * out while the test answers it, however slow the machine.
   */
  async function fire(id: string, expiresAt: string): Promise<void> {
    const due = Date.parse(expiresAt);
    while ((await redisNow()) < due) await new Promise((res) => setTimeout(res, 25));
    const app = h.service.app;
    await new DeadlineSweeper(app.sessionDeps, app.log, 60_000).sweep();
    const timedOut = (await h.api.events(id)).filter((e) => e.type === 'action.timed_out');
    assert.equal(timedOut.length, 1, 'the sweep timed the action out');
  }
  before(async () => {
    h = await startHarness({ env: { ...env, DEADLINE_SWEEP_MS: '3600000', AGENT_SWEEP_MS: '50' } });
  });
  after(async () => h?.close());

  /**
   * A session whose reply calls the client tool `lookup` (`<prefix>_c`) and `get_weather` (`<prefix>_w`), which
   * needs approval: it waits at `approve_tool_calls` (that call only), with a deadline of 1 s.
   */
  async function besideApproval(prefix: string) {
    const lookup = {
      name: 'lookup',
      description: 'Looks a word up',
      input_schema: { type: 'object', properties: { q: { type: 'string' } } },
    };
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup', { q: 'a' }, `${prefix}_c`),
        toolUse('get_weather', { location: 'Paris' }, `${prefix}_w`),
      ]),
      text('Done.'),
    );
    const r = await h.api.post('/v1/sessions', {
      input: 'Look it up, and the weather?',
      tools: [lookup, 'get_weather'],
      approval: ['get_weather'],
      action_timeout_s: 1,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id as string;
    const waiting = await h.api.waitStatus(id, 'requires_action');
    assert.equal(waiting.required_action.type, 'approve_tool_calls');
    assert.deepEqual(
      waiting.required_action.tool_calls.map((c: { id: string }) => c.id),
      [`${prefix}_w`],
    );
    return { id, waiting };
  }

  it('an approval timed out beside a client call: the approval is denied, then the client is asked, with its own deadline', async () => {
    const { id, waiting } = await besideApproval('toolu_lk');
    // From the next action on: the approval keeps its 1 s deadline.
    const p = await h.api.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: 3600 });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    await fire(id, waiting.required_action.expires_at);

    const timedOut = (await h.api.events(id)).find((e) => e.type === 'action.timed_out')!;
    assert.equal(timedOut.data.type, 'approve_tool_calls');
    assert.deepEqual(timedOut.data.tool_use_ids, ['toolu_lk_w']);
    // The session now asks for the client's result, as after a denial in time: a wait of its own, with its deadline
    // counted from its start (the policy now: an hour).
    const asked = await h.api.waitFor(
      id,
      (s) => s.status === 'requires_action' && s.required_action.type === 'submit_tool_results',
    );
    assert.deepEqual(
      asked.required_action.tool_calls.map((c: { id: string }) => c.id),
      ['toolu_lk_c'],
    );
    const expiresIn = Date.parse(asked.required_action.expires_at) - (await redisNow());
    assert.ok(expiresIn > 3_000_000 && expiresIn <= 3_600_000, asked.required_action.expires_at);
    const denial = asked.required_action.tool_results.find(
      (t: { tool_use_id: string }) => t.tool_use_id === 'toolu_lk_w',
    );
    assert.equal(denial.is_error, true);
    assert.match(JSON.stringify(denial.content), /Tool call denied: timed out/);
    const evs = await h.api.events(id);
    const decided = evs.filter((e) => e.type === 'tool_call.decided');
    assert.deepEqual(
      decided.map((e) => [e.data.tool_use_id, e.data.decision, e.data.by]),
      [['toolu_lk_w', 'deny', 'timeout']],
    );
    assert.equal(count(evs, 'tool_result.submitted'), 0, 'the client call was not answered by the timeout');
    // The denied call stays refused as timed out, though its step still waits.
    const late = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_lk_w`, { decision: 'approve' });
    assert.equal(late.status, 409, JSON.stringify(late.body));
    assert.equal(late.body.error.code, 'action_timed_out');
    assert.equal(late.body.error.details.tool_use_id, 'toolu_lk_w');

    // The client's result is taken, and the run goes on with both answers.
    const put = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_lk_c`, { content: 'found' });
    assert.equal(put.status, 202, JSON.stringify(put.body));
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const results = history[2].content as Array<{
      tool_use_id: string;
      content: unknown;
      is_error?: boolean;
    }>;
    const byId = new Map(results.map((b) => [b.tool_use_id, b]));
    assert.equal(byId.get('toolu_lk_w')?.is_error, true);
    assert.match(JSON.stringify(byId.get('toolu_lk_w')?.content), /Tool call denied: timed out/);
    assert.match(JSON.stringify(byId.get('toolu_lk_c')?.content), /found/);
    assert.notEqual(byId.get('toolu_lk_c')?.is_error, true);
    assert.match(JSON.stringify(history.at(-1).content), /Done\./);
  });

  it("a client's result given beside approvals past their deadline is taken: the timeout does not answer its call", async () => {
    const { id, waiting } = await besideApproval('toolu_ea');
    const due = Date.parse(waiting.required_action.expires_at);
    while ((await redisNow()) < due) await new Promise((res) => setTimeout(res, 25));
    // Past the approval's deadline, before any sweep: an answer to the approval is late, the client's result is not.
    const late = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_ea_w`, { decision: 'approve' });
    assert.equal(late.status, 409, JSON.stringify(late.body));
    assert.equal(late.body.error.code, 'action_timed_out');
    const early = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_ea_c`, { content: 'found' });
    assert.equal(early.status, 200, JSON.stringify(early.body));
    assert.equal(early.body.required_action.type, 'approve_tool_calls');
    await fire(id, waiting.required_action.expires_at);
    // The approval denied, the client's result in: nothing is left to ask, the run goes on.
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const results = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data[2].content as Array<{
      tool_use_id: string;
      content: unknown;
    }>;
    assert.deepEqual(
      results.map((b) => [
        b.tool_use_id,
        JSON.stringify(b.content).includes(b.tool_use_id === 'toolu_ea_c' ? 'found' : 'timed out'),
      ]),
      [
        ['toolu_ea_c', true],
        ['toolu_ea_w', true],
      ],
    );
  });

  it("an approval timed out beside a sub-agent's call: the child is not cancelled, and its call is waited for next", async () => {
    let release!: () => void;
    const gate = new Promise<void>((res) => (release = res));
    h.fake.setHandler(async (req) => {
      const last = req.messages.at(-1);
      const answered = Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result');
      if (JSON.stringify(req.system ?? '').includes('researcher')) {
        await gate;
        return text('Findings.');
      }
      if (answered) return text('Written.');
      return toolCalls([
        toolUse('researcher', { prompt: 'Why is the sky blue?' }, 'toolu_ag_r'),
        toolUse('get_weather', { location: 'Oslo' }, 'toolu_ag_w'),
      ]);
    });
    try {
      const r = await h.api.post('/v1/sessions', {
        system: 'You are a writer.',
        input: 'Write about the sky.',
        approval: ['get_weather'],
        action_timeout_s: 1,
        tools: [
          'get_weather',
          {
            type: 'agent',
            name: 'researcher',
            description: 'Researches a question.',
            session: { system: 'You are a researcher.' },
          },
        ],
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const id = r.body.id as string;
      const waiting = await h.api.waitStatus(id, 'requires_action');
      assert.equal(waiting.required_action.type, 'approve_tool_calls');
      const p = await h.api.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: 3600 });
      assert.equal(p.status, 200, JSON.stringify(p.body));
      // The child works on its call (held at its model request) while the approval waits.
      const deadline = Date.now() + 10_000;
      let child: { id: string; status: string } | undefined;
      while (!child && Date.now() < deadline) {
        child = (await h.api.get(`/v1/sessions/${id}/children`)).body.data[0];
        if (!child) await new Promise((res) => setTimeout(res, 25));
      }
      assert.ok(child, 'the child started');
      await fire(id, waiting.required_action.expires_at);

      const asked = await h.api.waitFor(
        id,
        (s) => s.status === 'requires_action' && s.required_action.type === 'submit_tool_results',
      );
      assert.deepEqual(
        asked.required_action.tool_calls.map((c: { id: string }) => c.id),
        ['toolu_ag_r'],
      );
      assert.ok(Date.parse(asked.required_action.expires_at) - (await redisNow()) > 3_000_000);
      assert.equal((await h.api.get(`/v1/sessions/${child.id}`)).body.status, 'running', 'not cancelled');

      // The child's answer is the call's result, and the parent goes on.
      release();
      const done = await h.api.waitStatus(id, ['idle', 'failed'], 30_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      const history = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
      const results = JSON.stringify(history[2].content);
      assert.match(results, /Findings\./);
      assert.match(results, /Tool call denied: timed out/);
    } finally {
      release();
      h.fake.setHandler(null);
    }
  });
});
