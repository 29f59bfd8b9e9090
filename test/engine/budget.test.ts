import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall } from '../fake/script.js';
import { checkHistory } from '../../src/history.js';

/** Every scripted reply uses 150 tokens: 100 in, 50 out. */
const used = { input_tokens: 100, output_tokens: 50 };

describe('policy budget (total tokens of the session)', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  const patch = (id: string, body: unknown) => h.api.req('PATCH', `/v1/sessions/${id}`, body);

  async function create(body: Record<string, unknown>) {
    const r = await h.api.post('/v1/sessions', { tools: ['calculate_sum', 'get_weather'], ...body });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  }

  it('stops the run after the tool results of the turn that reaches the budget, and refuses more until raised', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }, { usage: used }),
      toolCall('calculate_sum', { a: 2, b: 2 }, { usage: used }),
      toolCall('calculate_sum', { a: 3, b: 3 }, { usage: used }),
    );
    const s = await create({ input: 'Add things', budget: { total_tokens: 250 } });
    assert.deepEqual(s.budget, { total_tokens: 250 });
    assert.equal(s.usage.budget_total_tokens, 250);
    assert.equal(s.usage.budget_remaining_tokens, 250);

    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle');
    assert.equal(done.stop_reason, 'budget_exhausted');
    // Turn 1 used 150 (< 250), turn 2 brought the total to 300: no third request.
    assert.equal(h.fake.requests.length, 2);
    assert.equal(done.iteration, 2);
    assert.equal(done.usage.total_tokens, 300);
    assert.equal(done.usage.budget_remaining_tokens, 0);
    // The run stopped after turn 2's tool results: the history ends with them, valid for the Messages API.
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.length, 5);
    assert.equal(msgs.at(-1).role, 'user');
    assert.equal(msgs.at(-1).content[0].type, 'tool_result');
    assert.equal(msgs.at(-1).content[0].content, '4');
    assert.deepEqual(checkHistory(msgs), []);
    const events = (await h.api.get(`/v1/sessions/${s.id}/events?limit=1000`)).body.data;
    const last = events.filter((e: any) => e.type === 'session.status').at(-1);
    assert.equal(last.data.stop_reason, 'budget_exhausted');

    // A new message or `continue` needs a larger budget.
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'And more?' });
    assert.equal(m.status, 409);
    assert.equal(m.body.error.code, 'budget_exhausted');
    assert.equal(m.body.error.details.budget_remaining_tokens, 0);
    const c = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 409);
    assert.equal(c.body.error.code, 'budget_exhausted');
    // `retry` too, before it drops the reply and its tool results.
    const r = await h.api.post(`/v1/sessions/${s.id}/retry`);
    assert.equal(r.status, 409);
    assert.equal(r.body.error.code, 'budget_exhausted');
    assert.equal(
      (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data.length,
      5,
      'nothing added or dropped',
    );

    // Raised: `continue` goes on from the tool results it stopped after.
    const p = await patch(s.id, { budget: { total_tokens: 1000 } });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.usage.budget_remaining_tokens, 700);
    h.fake.enqueue(text('Done: 2, 4 and 6.', { usage: used }));
    const go = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(go.status, 202, JSON.stringify(go.body));
    const end = await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 4);
    assert.equal(end.stop_reason, 'end_turn');
    assert.equal(end.usage.total_tokens, 600);
    // The third request sent the history as the budget stop left it.
    assert.equal(h.fake.requests.length, 4);
    const third = h.fake.requests[2]!.messages;
    assert.deepEqual(third.slice(0, 5), msgs);
  });

  it('a budget below what is already spent is accepted: the run stops after the tool results it is waiting for', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Paris' }, { usage: used }));
    const s = await create({ input: 'Weather?', approval: 'always', budget: { total_tokens: 10_000 } });
    const waiting = await h.api.waitStatus(s.id, 'requires_action');
    assert.equal(waiting.usage.total_tokens, 150);
    // Queued while budget is left: kept by the budget stop.
    const q = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'And Tokyo?' });
    assert.equal(q.status, 202);
    const p = await patch(s.id, { budget: { total_tokens: 100 } });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.usage.budget_remaining_tokens, 0);
    const callId = waiting.required_action.tool_calls[0].id;
    const d = await h.api.post(`/v1/sessions/${s.id}/tool-calls/${callId}`, { decision: 'approve' });
    assert.equal(d.status, 202, JSON.stringify(d.body));
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'budget_exhausted');
    assert.equal(h.fake.requests.length, 1, 'no turn after the approved call');
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.at(-1).content[0].type, 'tool_result', 'the approved call ran and its result is kept');
    assert.equal(msgs.at(-1).content[1].text, 'And Tokyo?', 'the queued follow-up joined the results turn');
    assert.deepEqual(checkHistory(msgs), []);
    // Budget removed (null): a new message runs again.
    const p2 = await patch(s.id, { budget: null });
    assert.equal(p2.body.budget, null);
    assert.equal(p2.body.usage.budget_remaining_tokens, null);
    h.fake.enqueue(text('Sunny.'));
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'So?' });
    assert.equal(m.status, 202);
    const end = await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2);
    assert.equal(end.stop_reason, 'end_turn');
    // The follow-up joined the tool results turn the budget stop left last.
    const sent = h.fake.requests[1]!.messages.at(-1) as any;
    assert.deepEqual(
      sent.content.map((b: any) => b.type),
      ['tool_result', 'text', 'text'],
    );
  });

  it('a reply without tool calls ends the run with its own stop reason even past the budget', async () => {
    h.fake.enqueue(text('Hello!', { usage: { input_tokens: 500, output_tokens: 500 } }));
    const s = await create({ input: 'Hi', budget: { total_tokens: 100 } });
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'end_turn');
    assert.equal(done.usage.total_tokens, 1000);
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Again' });
    assert.equal(m.status, 409);
    assert.equal(m.body.error.code, 'budget_exhausted');
  });

  it('pause_after_turn: continue accepts the reply that reached the budget, its calls run, and the run stops', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 2 }, { id: 'toolu_rb', usage: used }),
      text('Never sent.', { usage: used }),
    );
    const s = await create({ input: 'Add', pause_after_turn: true, budget: { total_tokens: 100 } });
    const waiting = await h.api.waitStatus(s.id, ['requires_action', 'idle', 'failed']);
    assert.equal(waiting.required_action?.type, 'review_turn');
    assert.equal(waiting.usage.budget_remaining_tokens, 0);
    // As the runner would: the reply's calls run (the run goes on until its tool results are in the history).
    const c = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'budget_exhausted');
    assert.equal(h.fake.requests.length, 1, 'no turn after the reviewed reply');
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.at(-1).content[0].tool_use_id, 'toolu_rb');
    assert.equal(msgs.at(-1).content[0].content, '3');
    assert.deepEqual(checkHistory(msgs), []);
    // Stopped for its budget, the session refuses `continue` until it is raised.
    const again = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(again.status, 409);
    assert.equal(again.body.error.code, 'budget_exhausted');

    // A reviewed reply without calls ends the run with its own stop reason, whatever the budget.
    h.fake.enqueue(text('All done.', { usage: used }));
    const t = await create({ input: 'Hi', pause_after_turn: true, budget: { total_tokens: 100 } });
    const review = await h.api.waitStatus(t.id, ['requires_action', 'idle', 'failed']);
    assert.equal(review.required_action?.type, 'review_turn');
    const ok = await h.api.post(`/v1/sessions/${t.id}/continue`);
    assert.equal(ok.status, 202, JSON.stringify(ok.body));
    const ended = await h.api.waitStatus(t.id, ['idle', 'failed']);
    assert.equal(ended.stop_reason, 'end_turn');
    assert.equal(h.fake.requests.length, 2);
  });

  it('review_tool_results: continue accepts the results of the turn that reached the budget', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 2, b: 2 }, { usage: used }), text('Never sent.'));
    const s = await create({ input: 'Add', review_tool_results: true, budget: { total_tokens: 100 } });
    const waiting = await h.api.waitStatus(s.id, ['requires_action', 'idle', 'failed']);
    assert.equal(waiting.required_action?.type, 'review_tool_results');
    const c = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'budget_exhausted');
    assert.equal(h.fake.requests.length, 1);
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.at(-1).content[0].content, '4');
  });

  it('refuses budgets that are not a positive integer count of tokens', async () => {
    for (const budget of [
      { total_tokens: 0 },
      { total_tokens: -5 },
      { total_tokens: 1.5 },
      { tokens: 5 },
      7,
    ]) {
      const r = await h.api.post('/v1/sessions', { input: 'x', start: false, budget });
      assert.equal(r.status, 400, JSON.stringify(budget));
      assert.equal(r.body.error.code, 'invalid_request');
    }
    const s = await create({ input: 'x', start: false });
    assert.equal(s.budget, null);
    assert.equal(s.usage.budget_total_tokens, null);
    assert.equal(s.usage.total_tokens, 0);
    const r = await patch(s.id, { budget: { total_tokens: 'many' } });
    assert.equal(r.status, 400);
  });
});
