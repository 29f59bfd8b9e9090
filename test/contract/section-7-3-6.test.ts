import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { awaitingApproval } from '../helpers/approvals.js';
import { apiError, text, toolCall } from '../fake/script.js';
import { writerResearcher, writerWithResearcher } from '../helpers/agents.js';
import { compareIds } from '../../src/events/cursor.js';

/**
 * Claims of contract §7.4–7.6 no other test asserted as the contract words them (found by an audit of §7.3–7.6):
 * the bounds of `action_timeout_s` at the contract's own floor, the policy defaults, the 80 % warning's time, the
 * `deny` timeout of results under review, a PUT of the history of a failed session, and an `at` schedule's answer.
 */

describe('§7.4 policy action_timeout_s at the contract floor (no test override)', { timeout: 60_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { DEADLINE_SWEEP_MS: '50' } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  const create = (body: Record<string, unknown>) =>
    h.api.post('/v1/sessions', { input: 'x', start: false, ...body });

  it('null or 10..2592000: 9 and 2592001 are 400, 10, 2592000 and null are taken; absent is null', async () => {
    for (const bad of [9, 2_592_001, 0, -1, 10.5, '60']) {
      const r = await create({ action_timeout_s: bad });
      assert.equal(r.status, 400, `${bad}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, 'invalid_request', `${bad}`);
    }
    for (const good of [10, 2_592_000, null]) {
      const r = await create({ action_timeout_s: good });
      assert.equal(r.status, 201, `${good}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.action_timeout_s, good);
    }
    const d = await create({});
    assert.equal(d.status, 201);
    assert.equal(d.body.action_timeout_s, null);
    assert.equal(d.body.on_action_timeout, 'deny');
    assert.equal(d.body.pause_after_turn, false);
  });

  it('PATCH: the same bounds, and on_action_timeout is deny or fail only', async () => {
    const id = (await create({})).body.id as string;
    for (const bad of [9, 2_592_001]) {
      const p = await h.api.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: bad });
      assert.equal(p.status, 400, `${bad}: ${JSON.stringify(p.body)}`);
      assert.equal(p.body.error.code, 'invalid_request');
    }
    for (const good of [10, 2_592_000, null]) {
      const p = await h.api.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: good });
      assert.equal(p.status, 200, `${good}: ${JSON.stringify(p.body)}`);
      assert.equal(p.body.action_timeout_s, good);
    }
    const bad = await h.api.req('PATCH', `/v1/sessions/${id}`, { on_action_timeout: 'approve' });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'invalid_request');
    const c = await create({ on_action_timeout: 'ignore' });
    assert.equal(c.status, 400);
  });

  it('the same bounds in the create bodies a schedule and a sub-agent carry', async () => {
    const agent = (session: Record<string, unknown>) => ({
      type: 'agent',
      name: 'helper',
      description: 'Helps.',
      session,
    });
    for (const bad of [9, 2_592_001]) {
      const sch = await h.api.post('/v1/schedules', {
        cron: '0 9 * * *',
        session: { input: 'x', action_timeout_s: bad },
      });
      assert.equal(sch.status, 400, `schedule ${bad}: ${JSON.stringify(sch.body)}`);
      assert.equal(sch.body.error.code, 'invalid_request');
      const sub = await create({ tools: [agent({ action_timeout_s: bad })] });
      assert.equal(sub.status, 400, `sub-agent ${bad}: ${JSON.stringify(sub.body)}`);
      assert.equal(sub.body.error.code, 'invalid_request');
    }
    const sch = await h.api.post('/v1/schedules', {
      cron: '0 9 * * *',
      session: { input: 'x', action_timeout_s: 10 },
    });
    assert.equal(sch.status, 201, JSON.stringify(sch.body));
    assert.equal((await h.api.req('DELETE', `/v1/schedules/${sch.body.id}`)).status, 200);
    const sub = await create({ tools: [agent({ action_timeout_s: 10 })] });
    assert.equal(sub.status, 201, JSON.stringify(sub.body));
  });

  it('a 10 s deadline: required_action.expires_at 10 s on, action.expiring at 80 %, action.timed_out at the deadline', async () => {
    const { id, waiting } = await awaitingApproval(
      h,
      'toolu_10s',
      { action_timeout_s: 10 },
      text('No weather then.'),
    );
    const expiresAt = Date.parse(waiting.required_action.expires_at);
    const askedAt = Date.parse(waiting.updated_at);
    assert.ok(
      Math.abs(expiresAt - askedAt - 10_000) <= 1000,
      `${waiting.updated_at} → ${waiting.required_action.expires_at}`,
    );

    const expiring = await h.api.waitForEvent(id, 'action.expiring', 30_000);
    const warnedAt = Date.parse(expiring.at);
    // 80 % of 10 s is 8 s before the deadline's start: not before it, and well before the deadline itself.
    assert.ok(
      warnedAt >= expiresAt - 2_000 - 100,
      `warned at ${expiring.at}, deadline ${waiting.required_action.expires_at}`,
    );
    assert.equal(expiring.data.expires_at, waiting.required_action.expires_at);

    const timedOut = await h.api.waitForEvent(id, 'action.timed_out', 30_000);
    // Before the deadline's own event (how much before depends on how busy the machine is: no upper bound in time).
    assert.ok(compareIds(expiring.id, timedOut.id) < 0, `${expiring.id} then ${timedOut.id}`);
    assert.ok(Date.parse(timedOut.at) >= expiresAt - 100, `timed out at ${timedOut.at}`);
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const decided = (await h.api.events(id)).filter((e) => e.type === 'tool_call.decided');
    assert.deepEqual(
      decided.map((e) => [e.data.decision, e.data.reason]),
      [['deny', 'timed out']],
    );
  });
});

describe('§7.4 on_action_timeout "deny" with results under review; §7.5 PUT of a failed session', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { ACTION_TIMEOUT_MIN_S: '1', DEADLINE_SWEEP_MS: '50' } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('results under review are accepted as they stand (a replaced one as replaced) and the run goes on', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 2, b: 2 }, { id: 'toolu_rv' }), text('Four.'));
    const r = await h.api.post('/v1/sessions', {
      input: 'Add 2 and 2',
      tools: ['calculate_sum'],
      review_tool_results: true,
      action_timeout_s: 1,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const waiting = await h.api.waitStatus(r.body.id, ['requires_action', 'idle', 'failed']);
    assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting.error));
    assert.equal(waiting.required_action.type, 'review_tool_results');
    assert.ok(waiting.required_action.expires_at);
    const put = await h.api.req('PUT', `/v1/sessions/${r.body.id}/tool-results/toolu_rv`, {
      content: 'four (edited)',
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal(put.body.status, 'requires_action');

    const timedOut = await h.api.waitForEvent(r.body.id, 'action.timed_out', 30_000);
    assert.equal(timedOut.data.type, 'review_tool_results');
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.stop_reason, 'end_turn');
    assert.equal(h.fake.requests.length, 2);
    const sent = h.fake.requests[1]!.messages.at(-1)!;
    const result = (sent.content as any[]).find((b) => b.type === 'tool_result');
    assert.equal(result.tool_use_id, 'toolu_rv');
    assert.notEqual(result.is_error, true);
    const body = typeof result.content === 'string' ? result.content : result.content[0].text;
    assert.equal(body, 'four (edited)');
  });

  it('PUT …/messages replaces the whole history of a failed session', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: 'toolu_f' }));
    const r = await h.api.post('/v1/sessions', {
      input: 'Weather?',
      tools: ['get_weather'],
      approval: 'always',
      action_timeout_s: 1,
      on_action_timeout: 'fail',
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const failed = await h.api.waitStatus(r.body.id, ['failed', 'idle'], 30_000);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, 'action_timed_out');
    const messages = [
      { role: 'user', content: 'Weather?' },
      { role: 'assistant', content: [{ type: 'text', text: 'I cannot tell.' }] },
    ];
    const put = await h.api.req('PUT', `/v1/sessions/${r.body.id}/messages`, { messages });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const history = (await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data;
    assert.deepEqual(
      history.map((m: any) => [m.role, typeof m.content === 'string' ? m.content : m.content[0].text]),
      [
        ['user', 'Weather?'],
        ['assistant', 'I cannot tell.'],
      ],
    );
  });
});

describe('§7.4 ttl_s: an idle or failed session is deleted, one waiting for its client is not', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      env: { DEADLINE_SWEEP_MS: '50', DELETED_LOG_TTL_MS: '2000', WEBHOOK_SWEEP_GRACE_MS: '1000' },
    });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('a failed session unchanged for ttl_s is deleted; a requires_action one has no expires_at and stays', async () => {
    const w = await awaitingApproval(h, 'toolu_ttl', { ttl_s: 1 });
    assert.equal(w.waiting.expires_at, null, 'no expiry while it waits for its client');

    h.fake.enqueue(apiError(400, 'invalid_request_error'));
    const f = await h.api.post('/v1/sessions', { input: 'Hi', ttl_s: 1 });
    assert.equal(f.status, 201, JSON.stringify(f.body));
    const failed = await h.api.waitStatus(f.body.id, ['failed', 'idle']);
    assert.equal(failed.status, 'failed');
    assert.equal(Date.parse(failed.expires_at), Date.parse(failed.updated_at) + 1000);
    const deadline = Date.now() + 20_000;
    while ((await h.api.get(`/v1/sessions/${f.body.id}`)).status !== 404) {
      assert.ok(Date.now() < deadline, 'the failed session was not deleted');
      await new Promise((r) => setTimeout(r, 50));
    }
    const still = await h.api.get(`/v1/sessions/${w.id}`);
    assert.equal(still.status, 200);
    assert.equal(still.body.status, 'requires_action');
  });
});

describe('§7.5 the thread is carried across runs unless the history was rewritten (fork, an edited call)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  const history = async (id: string) => (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;

  it("a fork at the source's last iteration starts a thread of its own; the source's next run continues its own", async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 1 }), text('2.'));
    const s = await h.api.post('/v1/sessions', { input: 'Add', tools: ['calculate_sum'] });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    const idle = await h.api.waitFor(s.body.id, (x) => x.status === 'idle' && x.iteration === 2);
    const sourceLast = h.fake.requests[1]!.replyId;
    const f = await h.api.post(`/v1/sessions/${s.body.id}/fork`, { at_iteration: idle.iteration });
    assert.equal(f.status, 201, JSON.stringify(f.body));

    h.fake.enqueue(text('Fork answer.'));
    assert.equal((await h.api.post(`/v1/sessions/${f.body.id}/messages`, { text: 'Sure?' })).status, 202);
    const forked = await h.api.waitFor(f.body.id, (x) => x.status === 'idle' && x.iteration === 3);
    assert.equal(forked.stop_reason, 'end_turn', JSON.stringify(forked.error));
    const forkReq = h.fake.requests[2]!;
    assert.deepEqual(forkReq.body.thread, { type: 'create' }, "a fork's first run starts a new thread");
    assert.deepEqual(forkReq.body.messages, (await history(f.body.id)).slice(0, -1));

    h.fake.enqueue(text('Source answer.'));
    assert.equal((await h.api.post(`/v1/sessions/${s.body.id}/messages`, { text: 'Really?' })).status, 202);
    const again = await h.api.waitFor(s.body.id, (x) => x.iteration === 3 && x.status !== 'running');
    assert.equal(again.status, 'idle', JSON.stringify(again.error));
    const sourceReq = h.fake.requests[3]!;
    assert.deepEqual(sourceReq.body.thread, { type: 'continue', previous_message_id: sourceLast });
    assert.equal(sourceReq.body.messages.length, 1, 'the new message only');
  });

  it('a call whose input an approval edited: the next request is the whole history on a new thread', async () => {
    const { id } = await awaitingApproval(h, 'toolu_ed', {}, text('Berlin it is.'));
    const d = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_ed`, {
      decision: 'approve',
      input: { location: 'Berlin' },
    });
    assert.equal(d.status, 202, JSON.stringify(d.body));
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const next = h.fake.requests[1]!;
    assert.deepEqual(next.body.thread, { type: 'create' });
    assert.deepEqual(next.body.messages, (await history(id)).slice(0, -1));
    assert.deepEqual((next.body.messages[1]!.content as any[]).find((b) => b.id === 'toolu_ed').input, {
      location: 'Berlin',
    });
  });
});

describe('§7.4 cost of a model without a price', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());

  it('usage.cost_usd is null on the session, the iteration record and turn.completed alike', async () => {
    h.fake.enqueue(text('Hi.', { usage: { input_tokens: 10, output_tokens: 5 } }));
    const r = await h.api.post('/v1/sessions', { model: 'claude-fake-1', input: 'Hello' });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(done.usage.cost_usd, null);
    assert.deepEqual(done.usage.server_tool_use, {});
    const iters = (await h.api.get(`/v1/sessions/${r.body.id}/iterations`)).body.data;
    assert.equal(iters[0].usage.cost_usd, null);
    const completed = (await h.api.events(r.body.id)).filter((e) => e.type === 'turn.completed');
    assert.equal(completed.length, 1);
    assert.ok('cost_usd' in completed[0]!.data.usage, JSON.stringify(completed[0]!.data.usage));
    assert.equal(completed[0]!.data.usage.cost_usd, null);
  });
});

describe('§7.6 a one-shot `at` schedule', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());

  it('201 with its id, next_run_at the `at` time and overlap skip', async () => {
    const at = new Date(Date.now() + 3_600_000).toISOString();
    const r = await h.api.post('/v1/schedules', { at, session: { input: 'remind me' } });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.match(r.body.id, /^sch_/);
    assert.equal(Date.parse(r.body.next_run_at), Date.parse(at));
    assert.equal(r.body.overlap, 'skip');
    const list = (await h.api.get('/v1/schedules')).body.data.map((s: any) => s.id);
    assert.deepEqual(list, [r.body.id]);
    const runs = await h.api.get(`/v1/schedules/${r.body.id}/runs`);
    assert.equal(runs.status, 200);
    assert.deepEqual(runs.body.data, []);
    const p = await h.api.req('PATCH', `/v1/schedules/${r.body.id}`, { overlap: 'allow' });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.overlap, 'allow');
  });
});

describe('§7.6 a sub-agent as the model sees it', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { AGENT_SWEEP_MS: '50' } });
  });
  after(async () => h?.close());

  it('offered as a tool taking {"prompt"}; the child runs that prompt, its parent and children route name each other', async () => {
    h.fake.setHandler(writerResearcher);
    const r = await h.api.post('/v1/sessions', writerWithResearcher);
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const offered: any = h.fake.requests[0]!.tools.find((t: any) => t.name === 'researcher');
    assert.equal(offered.description, 'Researches a question.');
    assert.equal(offered.input_schema.type, 'object');
    assert.equal(offered.input_schema.properties.prompt.type, 'string');
    assert.deepEqual(offered.input_schema.required, ['prompt']);
    const children = (await h.api.get(`/v1/sessions/${r.body.id}/children`)).body.data;
    assert.equal(children.length, 1);
    const child = (await h.api.get(`/v1/sessions/${children[0].id}`)).body;
    const call = (await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data[1].content.find(
      (b: any) => b.type === 'tool_use',
    );
    assert.deepEqual(child.parent, { session_id: r.body.id, tool_use_id: call.id });
    const childHistory = (await h.api.get(`/v1/sessions/${child.id}/messages`)).body.data;
    const first = childHistory[0].content;
    assert.equal(typeof first === 'string' ? first : first[0].text, 'Why is the sky blue?');
  });
});
