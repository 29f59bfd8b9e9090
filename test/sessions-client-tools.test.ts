import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from './helpers/service.js';
import { assertSnapshotsEqual, snapshotRedis } from './helpers/redis-snapshot.js';
import { text, toolCalls, toolUse } from '../src/fake/script.js';
import { validateConversation } from '../src/fake/server.js';

const lookup = {
  name: 'lookup',
  description: 'Look something up in the client’s database.',
  input_schema: { type: 'object', properties: { q: { type: 'string' } } },
};

describe('client tools', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  const create = async () => {
    const r = await h.api.post('/v1/sessions', { input: 'Find q and add', tools: [lookup, 'calculate_sum'] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  };

  it('the client tool is declared to the model with its schema; a mixed reply waits only for the client call', async () => {
    // The model calls the client tool first, then the server tool: results go back in that order.
    h.fake.enqueue(
      toolCalls(
        [
          toolUse('lookup', { q: 'answer' }, 'toolu_look'),
          toolUse('calculate_sum', { a: 20, b: 22 }, 'toolu_sum'),
        ],
        { preamble: 'Let me check.' },
      ),
      text('It is 42.'),
    );
    const id = await create();
    const s = await h.api.waitStatus(id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.equal(s.stop_reason, null);
    assert.deepEqual(s.required_action, {
      type: 'submit_tool_results',
      tool_calls: [{ id: 'toolu_look', name: 'lookup', input: { q: 'answer' } }],
      tool_results: [{ tool_use_id: 'toolu_sum', content: '42', is_error: false }],
    });
    const sentTools = h.fake.requests[0]!.body.tools;
    assert.deepEqual(
      sentTools.find((t: any) => t.name === 'lookup'),
      lookup,
      'the model sees the client tool as declared',
    );
    assert.ok(sentTools.some((t: any) => t.name === 'calculate_sum'));
    assert.equal(h.fake.requests.length, 1, 'no turn is sent while a client result is missing');
    // the history ends with the unanswered calls
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body;
    assert.deepEqual(msgs.pending_tool_calls, ['toolu_look', 'toolu_sum']);

    // wrong ids and a server call's id are refused with a code, and change nothing
    const snap = await snapshotRedis(h.redis.url);
    const wrong = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_nope`, { content: 'x' });
    assert.equal(wrong.status, 409, JSON.stringify(wrong.body));
    assert.equal(wrong.body.error.code, 'unknown_tool_use_id');
    const server = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_sum`, { content: '41' });
    assert.equal(server.status, 409, JSON.stringify(server.body));
    assert.equal(server.body.error.code, 'tool_result_already_submitted');
    const decide = await h.api.post(`/v1/sessions/${id}/tool-calls/toolu_look`, { decision: 'approve' });
    assert.equal(decide.status, 409, JSON.stringify(decide.body));
    assertSnapshotsEqual(snap, await snapshotRedis(h.redis.url), 'refused results');

    const put = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_look`, {
      content: [{ type: 'text', text: 'the answer is 42' }],
    });
    assert.equal(put.status, 202, JSON.stringify(put.body));
    assert.equal(put.headers.get('etag'), `"${put.body.revision}"`);
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.stop_reason, 'end_turn');
    assert.equal(done.iteration, 2);
    assert.equal(h.fake.requests.length, 2);
    const next = h.fake.requests[1]!.body.messages;
    assert.deepEqual(next.at(-1), {
      role: 'user',
      content: [
        {
          type: 'tool_result',
          tool_use_id: 'toolu_look',
          content: [{ type: 'text', text: 'the answer is 42' }],
        },
        { type: 'tool_result', tool_use_id: 'toolu_sum', content: '42' },
      ],
    });
    assert.doesNotThrow(() => validateConversation(next, true));

    // answering again once it is answered: 409, nothing changes
    const snap2 = await snapshotRedis(h.redis.url);
    const again = await h.api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_look`, { content: 'again' });
    assert.equal(again.status, 409, JSON.stringify(again.body));
    assert.equal(again.body.error.code, 'nothing_awaits_results');
    assertSnapshotsEqual(snap2, await snapshotRedis(h.redis.url), 'a late answer');

    const rec = (await h.api.get(`/v1/sessions/${id}/iterations/1`)).body;
    assert.deepEqual(rec.tool_calls, [
      { id: 'toolu_look', name: 'lookup' },
      { id: 'toolu_sum', name: 'calculate_sum' },
    ]);
    assert.deepEqual(rec.tool_results, next.at(-1));
  });

  it('POST tool-results answers several calls; partial answers wait, duplicates and unknown ids are 409', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup', { q: 'one' }, 'toolu_l1'),
        toolUse('calculate_sum', { a: 1, b: 1 }, 'toolu_s1'),
        toolUse('lookup', { q: 'two' }, 'toolu_l2'),
        toolUse('lookup', { q: 'three' }, 'toolu_l3'),
      ]),
      text('Got them all.'),
    );
    const id = await create();
    const s = await h.api.waitStatus(id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.deepEqual(
      s.required_action.tool_calls.map((c: any) => c.id),
      ['toolu_l1', 'toolu_l2', 'toolu_l3'],
    );

    // two of three; `continue: true` does not go on while one is missing
    const part = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: [
        { tool_use_id: 'toolu_l3', content: 'three!' },
        { tool_use_id: 'toolu_l1', content: 'one!', is_error: false },
      ],
      continue: true,
    });
    assert.equal(part.status, 200, JSON.stringify(part.body));
    assert.equal(part.body.status, 'requires_action');
    assert.deepEqual(part.body.required_action.tool_calls, [
      { id: 'toolu_l2', name: 'lookup', input: { q: 'two' } },
    ]);
    assert.deepEqual(
      part.body.required_action.tool_results.map((r: any) => r.tool_use_id),
      ['toolu_l1', 'toolu_s1', 'toolu_l3'],
    );
    assert.equal(h.fake.requests.length, 1);

    const snap = await snapshotRedis(h.redis.url);
    const refusals: Array<[string, unknown, string]> = [
      [
        'an answered call',
        { results: [{ tool_use_id: 'toolu_l1', content: 'x' }] },
        'tool_result_already_submitted',
      ],
      [
        'a batch with one unknown id',
        {
          results: [
            { tool_use_id: 'toolu_l2', content: 'two!' },
            { tool_use_id: 'toolu_bogus', content: 'x' },
          ],
        },
        'unknown_tool_use_id',
      ],
      [
        'the same id twice in a batch',
        {
          results: [
            { tool_use_id: 'toolu_l2', content: 'a' },
            { tool_use_id: 'toolu_l2', content: 'b' },
          ],
        },
        'tool_result_already_submitted',
      ],
      [
        'a server call',
        { results: [{ tool_use_id: 'toolu_s1', content: 'x' }] },
        'tool_result_already_submitted',
      ],
    ];
    for (const [what, body, code] of refusals) {
      const r = await h.api.post(`/v1/sessions/${id}/tool-results`, body);
      assert.equal(r.status, 409, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, code, what);
    }
    assertSnapshotsEqual(snap, await snapshotRedis(h.redis.url), 'refused batches are all-or-nothing');

    const last = await h.api.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_l2', content: 'two failed', is_error: true }],
      continue: true,
    });
    assert.equal(last.status, 202, JSON.stringify(last.body));
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual(h.fake.requests[1]!.body.messages.at(-1), {
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: 'toolu_l1', content: 'one!' },
        { type: 'tool_result', tool_use_id: 'toolu_s1', content: '2' },
        { type: 'tool_result', tool_use_id: 'toolu_l2', content: 'two failed', is_error: true },
        { type: 'tool_result', tool_use_id: 'toolu_l3', content: 'three!' },
      ],
    });
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body;
    assert.deepEqual(msgs.data.slice(0, -1), h.fake.requests[1]!.body.messages);
    assert.deepEqual(msgs.pending_tool_calls, []);
  });
});
