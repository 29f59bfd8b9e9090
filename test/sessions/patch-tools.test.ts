import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { availableTools, text, toolCall } from '../fake/script.js';
import { checkHistory } from '../../src/history.js';
import type { FakeRequest } from '../../src/offline/wire.js';

const names = (r: FakeRequest) => [...availableTools(r).keys()].sort();
const betas = (r: FakeRequest) => String(r.headers['anthropic-beta'] ?? '');
const lookup = {
  name: 'lookup',
  description: 'Look an order up',
  input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
};

describe('PATCH tools between turns', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  const patch = (id: string, body: unknown) => h.api.req('PATCH', `/v1/sessions/${id}`, body);
  const history = async (id: string) => (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;

  it('mid-run: addTools/removeTools from the next turn, params.tools and the thread kept; a new run tells again', async () => {
    let id = '';
    h.fake.setHandler(async (_req, index) => {
      if (index === 0) return toolCall('calculate_sum', { a: 1, b: 2 });
      if (index === 1) {
        // Lands while turn 2 is in flight: the change goes with turn 3.
        const p = await patch(id, { tools: ['get_weather'] });
        assert.equal(p.status, 200, JSON.stringify(p.body));
        assert.deepEqual(p.body.tools, ['get_weather']);
        return toolCall('calculate_sum', { a: 3, b: 4 });
      }
      if (index === 2) return toolCall('get_weather', { location: 'Paris' });
      if (index === 3) return toolCall('calculate_sum', { a: 5, b: 6 });
      if (index === 4) return text('Done.');
      if (index === 5) return toolCall('get_weather', { location: 'Tokyo' });
      return text('Sunny.');
    });
    const s = await h.api.post('/v1/sessions', { tools: ['calculate_sum'], input: 'Go', start: false });
    id = s.body.id;
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Add, then weather' });
    const done = await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 5);
    assert.equal(done.stop_reason, 'end_turn', JSON.stringify(done.error));
    const reqs = h.fake.requests;
    assert.deepEqual(names(reqs[1]!), ['calculate_sum']);
    // Turn 3: the change, as the runner sends it, on the same thread, `tools` untouched (the prompt cache's prefix).
    const third = reqs[2]!;
    assert.equal(third.body.thread?.type, 'continue');
    assert.equal(third.body.tools, undefined);
    assert.deepEqual(
      third.tools.map((t: any) => t.name),
      ['calculate_sum'],
    );
    assert.ok(betas(third).includes('inline-tools-2026-09-15'), betas(third));
    const sent: any[] = third.body.messages;
    assert.equal(sent.length, 2, 'the tool results, then the change');
    assert.equal(sent[0].content[0].type, 'tool_result');
    assert.equal(sent[1].role, 'system');
    assert.deepEqual(sent[1].content[0], {
      type: 'tool_removal',
      tool: { type: 'tool_reference', name: 'calculate_sum' },
    });
    assert.equal(sent[1].content[1].type, 'tool_addition');
    assert.equal(sent[1].content[1].tool.type, 'tool_definition');
    assert.equal(sent[1].content[1].tool.definition.name, 'get_weather');
    assert.equal(sent[1].content[1].tool.definition.input_schema.type, 'object');
    assert.equal(sent[1].content[1].tool.definition.run, undefined);
    assert.deepEqual(names(third), ['get_weather'], 'the fake saw the new set');
    // The added server tool ran; the removed one is "not found".
    const msgs = await history(id);
    const resultOf = (i: number) => reqs[i]!.messages.at(-1)!.content as any[];
    assert.equal(resultOf(3)[0].is_error, undefined);
    assert.match(String(resultOf(3)[0].content), /Paris/);
    assert.equal(resultOf(4)[0].is_error, true);
    assert.match(String(resultOf(4)[0].content), /Tool 'calculate_sum' not found/);
    for (const r of reqs.slice(1)) assert.equal(r.body.thread?.type, 'continue');
    // The stored history holds the change where the model saw it, and is what the last request extended.
    assert.deepEqual(reqs.at(-1)!.messages, msgs.slice(0, -1));
    assert.equal(msgs.filter((m: any) => m.role === 'system').length, 1);
    assert.deepEqual(checkHistory(msgs.filter((m: any) => m.role !== 'system')), []);
    const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
    const updated = events.find((e: any) => e.type === 'tools.updated');
    assert.deepEqual(updated.data.removed, ['calculate_sum']);
    assert.deepEqual(updated.data.added, ['get_weather']);
    assert.ok(events.some((e: any) => e.type === 'tools.applied'));

    // A new run: a new runner with the same `tools` (cache prefix), told of the added server tool again so it runs it.
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And Tokyo?' });
    const end = await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 7);
    assert.equal(end.stop_reason, 'end_turn');
    // It continues the session's thread (contract §7.5), whose `tools` are still the set at create.
    const next = reqs[5]!;
    assert.equal(next.body.thread?.type, 'continue');
    assert.equal(next.body.tools, undefined);
    assert.deepEqual(
      next.tools.map((t: any) => t.name),
      ['calculate_sum'],
    );
    assert.deepEqual(names(next), ['get_weather']);
    const tokyo = reqs[6]!.messages.at(-1)!.content as any[];
    assert.equal(tokyo[0].is_error, undefined, JSON.stringify(tokyo));
    assert.match(String(tokyo[0].content), /Tokyo/);
  });

  it('mid-run: a tool added is held to the approval policy from the next turn (not run as an unknown server call)', async () => {
    let id = '';
    h.fake.setHandler(async (_req, index) => {
      if (index === 0) {
        // Lands while turn 1 is in flight: turn 2 may call the added tool.
        const p = await patch(id, { tools: ['calculate_sum', 'get_weather'] });
        assert.equal(p.status, 200, JSON.stringify(p.body));
        return toolCall('calculate_sum', { a: 1, b: 2 });
      }
      if (index === 1) return toolCall('get_weather', { location: 'Paris' });
      return text('Sunny.');
    });
    const s = await h.api.post('/v1/sessions', {
      tools: ['calculate_sum'],
      approval: ['get_weather'],
      input: 'Add, then the weather',
    });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    id = s.body.id;
    const waiting = await h.api.waitFor(id, (x) => x.status !== 'running');
    assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting.error));
    assert.equal(waiting.required_action.type, 'approve_tool_calls');
    assert.deepEqual(
      waiting.required_action.tool_calls.map((c: { name: string }) => c.name),
      ['get_weather'],
    );
    const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as any[];
    assert.ok(!events.some((e) => e.type === 'tool.started' && e.data.name === 'get_weather'), 'not run');
  });

  it('while idle: a client tool added is offered with the next run, and its call waits for the client', async () => {
    const s = await h.api.post('/v1/sessions', { tools: ['calculate_sum'], input: 'Hi', start: false });
    const p = await patch(s.body.id, { tools: ['calculate_sum', lookup] });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.deepEqual(p.body.tools, ['calculate_sum', lookup]);
    h.fake.enqueue(toolCall('lookup', { q: '1234' }));
    await h.api.post(`/v1/sessions/${s.body.id}/messages`, { text: 'Order 1234?' });
    const waiting = await h.api.waitStatus(s.body.id, 'requires_action');
    assert.equal(waiting.required_action.type, 'submit_tool_results');
    const first = h.fake.requests[0]!;
    assert.deepEqual(
      (first.body.tools ?? []).map((t: any) => t.name),
      ['calculate_sum'],
    );
    const change: any = first.body.messages.at(-1);
    assert.equal(change.role, 'system');
    assert.deepEqual(change.content, [
      { type: 'tool_addition', tool: { type: 'tool_definition', definition: lookup } },
    ]);
    assert.deepEqual(names(first), ['calculate_sum', 'lookup']);
  });

  it("a fork from before a change is told the fork's tools: the changes after its point were never in its history", async () => {
    h.fake.enqueue(text('One.'));
    const s = await h.api.post('/v1/sessions', { tools: ['calculate_sum', lookup], input: 'Hi' });
    const id = s.body.id;
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 1);
    assert.equal((await patch(id, { tools: ['get_weather'] })).status, 200);
    h.fake.enqueue(text('Two.'));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'More' });
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 2);
    assert.deepEqual(names(h.fake.requests[1]!), ['get_weather']);
    // The fork keeps the source's tools, but its history ends before the change that told the model of them.
    const f = await h.api.post(`/v1/sessions/${id}/fork`, { at_iteration: 1 });
    assert.equal(f.status, 201, JSON.stringify(f.body));
    assert.deepEqual(f.body.tools, ['get_weather']);
    assert.equal((await history(f.body.id)).length, 2);
    h.fake.enqueue(text('Three.'));
    await h.api.post(`/v1/sessions/${f.body.id}/messages`, { text: 'Again' });
    const done = await h.api.waitFor(f.body.id, (x) => x.status !== 'running');
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const third = h.fake.requests[2]!;
    assert.equal(third.status, 200);
    assert.deepEqual(
      names(third),
      ['get_weather'],
      "the model is offered the fork's tools, as it answers them",
    );
    // The source is as it was: its next run tells nothing again.
    h.fake.enqueue(text('Four.'));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And?' });
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 3);
    assert.deepEqual(names(h.fake.requests[3]!), ['get_weather']);
  });

  it('a fork between a client tool added and removed is told the removal: the tool comes back as it was added', async () => {
    const pick = {
      name: 'pick',
      description: 'Pick one',
      input_schema: { type: 'object', properties: { of: { type: 'string' } } },
    };
    h.fake.enqueue(text('One.'));
    const s = await h.api.post('/v1/sessions', { tools: [lookup], input: 'Hi' });
    const id = s.body.id;
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 1);
    assert.equal((await patch(id, { tools: [lookup, pick] })).status, 200);
    h.fake.enqueue(text('Two.'));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'More' });
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 2);
    assert.equal((await patch(id, { tools: [lookup] })).status, 200);
    h.fake.enqueue(text('Three.'));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Again' });
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 3);
    assert.deepEqual(names(h.fake.requests[2]!), ['lookup']);
    // A tenant tool of the same name registered since is not the tool the history added and removed.
    const reg = await h.api.req('PUT', '/v1/tools/pick', {
      description: 'Another pick',
      input_schema: { type: 'object', properties: {} },
      runner: { type: 'worker' },
    });
    assert.equal(reg.status, 201, JSON.stringify(reg.body));
    // The fork's history holds pick's addition, not its removal: its first run must tell the removal.
    const f = await h.api.post(`/v1/sessions/${id}/fork`, { at_iteration: 2 });
    assert.equal(f.status, 201, JSON.stringify(f.body));
    assert.deepEqual(f.body.tools, [lookup]);
    h.fake.enqueue(text('Four.'));
    await h.api.post(`/v1/sessions/${f.body.id}/messages`, { text: 'And?' });
    const done = await h.api.waitFor(f.body.id, (x) => x.status !== 'running');
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const fourth = h.fake.requests[3]!;
    assert.equal(fourth.status, 200);
    assert.deepEqual(names(fourth), ['lookup'], 'the fork tells the removal of pick');
  });

  it('PUT …/messages with a history without the changes: the next run tells them again (a removed tool is not offered)', async () => {
    const s = await h.api.post('/v1/sessions', { tools: ['get_weather', 'calculate_sum'], start: false });
    const id = s.body.id;
    h.fake.enqueue(text('A'), text('B'), text('C'));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'one' });
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 1);
    assert.equal((await patch(id, { tools: ['get_weather', 'evaluate_expression'] })).status, 200);
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'two' });
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 2);
    assert.deepEqual(names(h.fake.requests[1]!), ['evaluate_expression', 'get_weather']);
    const put = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
      messages: [
        { role: 'user', content: 'x' },
        { role: 'assistant', content: 'y' },
      ],
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'three' });
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 3);
    const third = h.fake.requests[2]!;
    // The runner's overrides outlive setMessagesParams: calculate_sum stays removed, evaluate_expression added.
    assert.deepEqual(names(third), ['evaluate_expression', 'get_weather']);
    const changes = (third.body.messages as any[])
      .filter((m) => m.role === 'system')
      .flatMap((m) => m.content.map((b: any) => [b.type, b.tool.name ?? b.tool.definition?.name]));
    assert.deepEqual(changes, [
      ['tool_removal', 'calculate_sum'],
      ['tool_addition', 'evaluate_expression'],
    ]);
    // The history answers what was sent: given back to create, it is taken with the session's tools.
    const again = await h.api.post('/v1/sessions', {
      tools: ['get_weather', 'evaluate_expression'],
      messages: await history(id),
      start: false,
    });
    assert.equal(again.status, 201, JSON.stringify(again.body));
  });

  it('refuses to remove a tool with a pending call (409 tool_call_pending), and bad sets like create does', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Paris' }));
    const s = await h.api.post('/v1/sessions', {
      tools: ['calculate_sum', 'get_weather'],
      input: 'Weather?',
      approval: 'always',
    });
    const waiting = await h.api.waitStatus(s.body.id, 'requires_action');
    const r = await patch(s.body.id, { tools: ['calculate_sum'] });
    assert.equal(r.status, 409);
    assert.equal(r.body.error.code, 'tool_call_pending');
    assert.equal(r.body.error.details.tool, 'get_weather');
    assert.equal(r.body.error.details.tool_use_id, waiting.required_action.tool_calls[0].id);
    const same = (await h.api.get(`/v1/sessions/${s.body.id}`)).body;
    assert.deepEqual(same.tools, ['calculate_sum', 'get_weather']);
    assert.equal(same.revision, waiting.revision, 'nothing written');
    // Keeping it is fine, even while it waits.
    const ok = await patch(s.body.id, { tools: ['get_weather'] });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    for (const [tools, code] of [
      [['no_such_tool'], 'unknown_tool'],
      [['get_weather', 'get_weather'], 'duplicate_tool'],
      [[{ ...lookup, name: 'get_weather' }], 'tool_name_conflict'],
    ] as const) {
      const bad = await patch(s.body.id, { tools });
      assert.equal(bad.status, 400, JSON.stringify(tools));
      assert.equal(bad.body.error.code, code);
    }
  });

  it('the fake checks tool changes as the API does', async () => {
    const post = (body: unknown, beta = 'inline-tools-2026-09-15') =>
      fetch(`${h.fake.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'anthropic-beta': beta },
        body: JSON.stringify(body),
      });
    const base = {
      model: 'm',
      max_tokens: 10,
      tools: [{ name: 'a', input_schema: { type: 'object' } }],
    };
    const user = { role: 'user', content: 'hi' };
    const removal = (name: string) => ({
      role: 'system',
      content: [{ type: 'tool_removal', tool: { type: 'tool_reference', name } }],
    });
    assert.equal((await post({ ...base, messages: [user, removal('a')] })).status, 200);
    assert.equal((await post({ ...base, messages: [user, removal('b')] })).status, 400);
    assert.equal((await post({ ...base, messages: [user, removal('a')] }, 'other')).status, 400);
    const addition = {
      role: 'system',
      content: [{ type: 'tool_addition', tool: { type: 'tool_definition', definition: { name: 'b' } } }],
    };
    assert.equal((await post({ ...base, messages: [user, addition] })).status, 400, 'no input_schema');
  });
});
