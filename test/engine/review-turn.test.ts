import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall } from '../fake/script.js';

/** Policy `pause_after_turn` and the `review_turn` action (contract §7.5): the loop body of the docs. */
describe('pause_after_turn', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  const events = async (id: string): Promise<any[]> =>
    (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
  async function reviewing(): Promise<any> {
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }, { id: 'toolu_r1' }));
    const r = await h.api.post('/v1/sessions', {
      input: 'Add 1 and 2',
      tools: ['calculate_sum'],
      pause_after_turn: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.body.pause_after_turn, true);
    const s = await h.api.waitStatus(r.body.id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.status, 'requires_action', JSON.stringify(s.error));
    assert.equal(s.required_action.type, 'review_turn');
    assert.equal(s.required_action.message.stop_reason, 'tool_use');
    assert.equal(s.required_action.message.content[0].id, 'toolu_r1');
    assert.deepEqual(
      s.required_action.tool_calls.map((c: any) => c.id),
      ['toolu_r1'],
    );
    assert.equal((await events(s.id)).filter((e) => e.type === 'tool.started').length, 0, 'not run yet');
    return s;
  }

  it('a call that needs approval is decided after the review, not during it', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }, { id: 'toolu_a1' }));
    const r = await h.api.post('/v1/sessions', {
      input: 'Add 1 and 2',
      tools: ['calculate_sum'],
      approval: 'always',
      pause_after_turn: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.required_action.type, 'review_turn');
    // Approved during the review, the call would run before its turn was reviewed.
    const early = await h.api.post(`/v1/sessions/${s.id}/tool-calls/toolu_a1`, { decision: 'approve' });
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.error.code, 'nothing_awaits_approval');
    const still = (await h.api.get(`/v1/sessions/${s.id}`)).body;
    assert.equal(still.status, 'requires_action');
    assert.equal(still.required_action.type, 'review_turn');
    assert.equal((await events(s.id)).filter((e) => e.type === 'tool_call.decided').length, 0);

    // The review's continue brings the call to its decision.
    const c = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const decide = await h.api.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && x.revision > s.revision,
    );
    assert.equal(decide.required_action.type, 'approve_tool_calls');
    assert.equal((await events(s.id)).filter((e) => e.type === 'tool.started').length, 0, 'not run yet');
    h.fake.enqueue(text('3.'));
    const ok = await h.api.post(`/v1/sessions/${s.id}/tool-calls/toolu_a1`, { decision: 'approve' });
    assert.equal(ok.status, 202, JSON.stringify(ok.body));
    const next = await h.api.waitFor(s.id, (x) => x.status === 'requires_action' && x.iteration === 2);
    assert.equal(next.required_action.type, 'review_turn');
    assert.equal((h.fake.requests[1]!.messages.at(-1)!.content as any[])[0].content, '3');
  });

  it("a client tool's call takes no result during the review, only after continue", async () => {
    const lookup = {
      name: 'lookup',
      description: 'Look something up.',
      input_schema: { type: 'object' as const, properties: { q: { type: 'string' } } },
    };
    h.fake.enqueue(toolCall('lookup', { q: 'x' }, { id: 'toolu_c1' }));
    const r = await h.api.post('/v1/sessions', {
      input: 'Look x up',
      tools: [lookup],
      pause_after_turn: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.required_action.type, 'review_turn');
    // Nothing else missing: a result taken now would start the run with the reply still under review.
    const early = await h.api.req('PUT', `/v1/sessions/${s.id}/tool-results/toolu_c1`, { content: 'found' });
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.error.code, 'tool_result_not_expected');
    assert.match(early.body.error.message, /under review.*continue/);
    const still = (await h.api.get(`/v1/sessions/${s.id}`)).body;
    assert.equal(still.status, 'requires_action');
    assert.equal(still.required_action.type, 'review_turn');
    assert.equal(still.revision, s.revision, 'nothing written');
    assert.equal((await events(s.id)).filter((e) => e.type === 'tool_result.submitted').length, 0);
    assert.equal(h.fake.requests.length, 1);

    const c = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const waits = await h.api.waitFor(s.id, (x) => x.status === 'requires_action' && x.revision > s.revision);
    assert.equal(waits.required_action.type, 'submit_tool_results');
    h.fake.enqueue(text('Found.'));
    const ok = await h.api.req('PUT', `/v1/sessions/${s.id}/tool-results/toolu_c1`, { content: 'found' });
    assert.equal(ok.status, 202, JSON.stringify(ok.body));
    const next = await h.api.waitFor(s.id, (x) => x.status === 'requires_action' && x.iteration === 2);
    assert.equal(next.required_action.type, 'review_turn');
    assert.equal(next.required_action.message.content[0].text, 'Found.');
    assert.equal((h.fake.requests[1]!.messages.at(-1)!.content as any[])[0].content, 'found');
  });

  it('continue goes on as the runner would: the calls run, the next reply is reviewed too', async () => {
    const s = await reviewing();
    h.fake.enqueue(text('3.'));
    const c = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    const next = await h.api.waitFor(s.id, (x) => x.status !== 'running' && x.iteration === 2);
    assert.equal(next.status, 'requires_action');
    assert.equal(next.required_action.type, 'review_turn');
    assert.equal(next.required_action.message.content[0].text, '3.');
    const result = h.fake.requests[1]!.messages.at(-1)!.content as any[];
    assert.equal(result[0].content, '3');
    const c2 = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c2.status, 202);
    const end = await h.api.waitFor(s.id, (x) => x.status !== 'running');
    assert.equal(end.status, 'idle');
    assert.equal(end.stop_reason, 'end_turn');
    assert.equal(h.fake.requests.length, 2);
  });

  it('a message answers the calls "not run" and goes in the same user turn', async () => {
    const s = await reviewing();
    h.fake.enqueue(text('Fine.'));
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Do not add, just say fine.' });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    await h.api.waitFor(s.id, (x) => x.status === 'requires_action' && x.iteration === 2);
    const req = h.fake.requests[1]!;
    assert.equal(req.status, 200);
    const turn = req.messages.at(-1)!.content as any[];
    assert.equal(turn[0].type, 'tool_result');
    assert.equal(turn[0].is_error, true);
    assert.match(turn[0].content, /^Error: not run: /);
    assert.equal(turn[1].text, 'Do not add, just say fine.');
    assert.equal((await events(s.id)).filter((e) => e.type === 'tool.started').length, 0);
  });

  it('a message answers "not run" a `validate: true` call whose input its schema refuses, too', async () => {
    const lookup = {
      name: 'lookup',
      description: 'Look something up.',
      input_schema: { type: 'object' as const, properties: { q: { type: 'string' } }, required: ['q'] },
      validate: true,
    };
    h.fake.enqueue(toolCall('lookup', { q: 5 }, { id: 'toolu_v1' }), text('Fine.'));
    const r = await h.api.post('/v1/sessions', {
      input: 'Look 5 up',
      tools: [lookup],
      pause_after_turn: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.required_action.type, 'review_turn');
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Never mind.' });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    await h.api.waitFor(s.id, (x) => x.status === 'requires_action' && x.iteration === 2);
    const turn = h.fake.requests[1]!.messages.at(-1)!.content as any[];
    assert.equal(turn[0].tool_use_id, 'toolu_v1');
    assert.equal(turn[0].is_error, true);
    assert.equal(turn[0].content, 'Error: not run: the turn was reviewed and answered with a message');
    assert.equal(turn[1].text, 'Never mind.');
  });

  it('retry sends the turn again; PUT …/messages takes over the history', async () => {
    const s = await reviewing();
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }, { id: 'toolu_r2' }));
    const r = await h.api.post(`/v1/sessions/${s.id}/retry`);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const again = await h.api.waitFor(
      s.id,
      (x) => x.status === 'requires_action' && h.fake.requests.length === 2,
    );
    assert.equal(again.required_action.message.content[0].id, 'toolu_r2');
    assert.equal(h.fake.requests[1]!.messages.length, 1);
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'Something else' }] }];
    const p = await h.api.req('PUT', `/v1/sessions/${s.id}/messages`, { messages });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.status, 'idle');
    assert.equal(p.body.required_action, null);
    assert.deepEqual((await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data, messages);
    // As the runner after `setMessagesParams`: continue sends the history given.
    h.fake.enqueue(text('Else.'));
    assert.equal((await h.api.post(`/v1/sessions/${s.id}/continue`)).status, 202);
    await h.api.waitFor(s.id, (x) => x.status === 'requires_action' && h.fake.requests.length === 3);
    assert.deepEqual(h.fake.requests[2]!.messages, messages);
  });

  it('PUT …/messages keeping the reply under review: continue runs its calls and sends their results', async () => {
    const s = await reviewing();
    // The history under review ends with the reply; given back as it is, the reply is kept.
    const kept = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.deepEqual(kept.at(-1).content, s.required_action.message.content);
    const p = await h.api.req('PUT', `/v1/sessions/${s.id}/messages`, { messages: kept });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    h.fake.enqueue(text('3.'));
    const c = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    await h.api.waitFor(s.id, (x) => x.status === 'requires_action' && h.fake.requests.length === 2);
    const sent = h.fake.requests[1]!.messages;
    assert.equal(sent.length, 3);
    const results = sent.at(-1)!.content as any[];
    assert.equal(results[0].tool_use_id, 'toolu_r1');
    assert.equal(results[0].content, '3');
    // An idle session whose history ends with the model's answer has nothing to continue.
    const done = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(done.status, 202, 'the review of "3." goes on');
    await h.api.waitFor(s.id, (x) => x.status === 'idle');
    const none = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(none.status, 409);
    assert.equal(none.body.error.code, 'nothing_to_continue');
  });
});
