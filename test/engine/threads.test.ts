import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { apiError, text, toolCall } from '../fake/script.js';
import { checkHistory } from '../../src/history.js';
import type { FakeRequest } from '../../src/offline/wire.js';

const threadOf = (r: FakeRequest) => r.body.thread;

/**
 * Message threads upstream (the SDK client's default): within a run, each turn after the first sends only what the
 * history gained since the reply it continues; the SDK replays the whole history whenever the thread cannot go on.
 */
describe('message threads upstream', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  async function create(body: Record<string, unknown>) {
    const r = await h.api.post('/v1/sessions', { tools: ['calculate_sum'], ...body });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body;
  }
  const history = async (id: string) => (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;

  it('within a run, each turn after the first continues the thread with the new messages only', async () => {
    for (let i = 1; i <= 4; i++) h.fake.enqueue(toolCall('calculate_sum', { a: i, b: i }));
    h.fake.enqueue(text('Done.'));
    const s = await create({ input: 'Add things', system: 'Be brief.' });
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.iteration, 5);
    const reqs = h.fake.requests;
    assert.equal(reqs.length, 5);
    assert.deepEqual(threadOf(reqs[0]!), { type: 'create' });
    assert.equal(reqs[0]!.body.messages.length, 1);
    assert.equal(reqs[0]!.body.system, 'Be brief.');
    for (let i = 1; i < reqs.length; i++) {
      const r = reqs[i]!;
      assert.deepEqual(threadOf(r), { type: 'continue', previous_message_id: reqs[i - 1]!.replyId });
      assert.equal(r.body.messages.length, 1, `request ${i}: the tool results only`);
      assert.equal(r.body.messages[0]!.role, 'user');
      assert.equal(r.body.system, undefined, 'a continue takes system and tools from the thread');
      assert.equal(r.body.tools, undefined);
      // What the model saw is the whole conversation, as stored.
      assert.equal(r.system, 'Be brief.');
      assert.deepEqual(
        r.tools.map((t: any) => t.name),
        ['calculate_sum'],
      );
    }
    const msgs = await history(s.id);
    assert.deepEqual(reqs.at(-1)!.messages, msgs.slice(0, -1));
    assert.deepEqual(checkHistory(msgs), []);
  });

  it('a new run continues the session thread (its anchor is persisted) with the new message only', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }), text('3.'), text('Yes.'));
    const s = await create({ input: 'Add 1 and 2' });
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2);
    const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Sure?' });
    assert.equal(m.status, 202);
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 3);
    const third = h.fake.requests[2]!;
    assert.deepEqual(threadOf(third), { type: 'continue', previous_message_id: h.fake.requests[1]!.replyId });
    assert.equal(third.body.messages.length, 1, 'the new message only');
    assert.deepEqual(third.messages, (await history(s.id)).slice(0, -1));
  });

  it('a thread the API no longer has: the runner replays the whole history and the run goes on', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }),
      apiError(404, 'not_found_error', {
        message: 'thread.previous_message_id: no stored message thread ends with it',
        details: { error_code: 'thread_not_found' },
      }),
      toolCall('calculate_sum', { a: 2, b: 2 }),
      text('2 and 4.'),
    );
    const s = await create({ input: 'Add' });
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.iteration, 3);
    const reqs = h.fake.requests;
    assert.equal(reqs.length, 4);
    assert.equal(threadOf(reqs[1]!)?.type, 'continue');
    assert.equal(reqs[1]!.status, 404);
    // The replay: a new thread with every message, then continues from it.
    assert.deepEqual(threadOf(reqs[2]!), { type: 'create' });
    assert.equal(reqs[2]!.body.messages.length, 3);
    assert.equal(threadOf(reqs[3]!)?.type, 'continue');
    assert.equal(reqs[3]!.body.messages.length, 1);
    const msgs = await history(s.id);
    assert.equal(msgs.length, 6);
    assert.deepEqual(reqs.at(-1)!.messages, msgs.slice(0, -1));
    assert.deepEqual(checkHistory(msgs), []);
  });

  it('an edited history (a retried cut reply) is sent whole on a new thread', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }),
      text('cut', { stop_reason: 'max_tokens' }),
      text('whole answer'),
    );
    const s = await create({ input: 'Add', on_max_tokens: { retry: 'double', ceiling: 4096 } });
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.stop_reason, 'end_turn', JSON.stringify(done.error));
    const reqs = h.fake.requests;
    assert.equal(reqs.length, 3);
    assert.equal(threadOf(reqs[1]!)?.type, 'continue');
    // The retry drops the cut reply the thread holds: the SDK starts a new thread with the history without it.
    assert.deepEqual(threadOf(reqs[2]!), { type: 'create' });
    assert.equal(reqs[2]!.body.max_tokens, 2048);
    assert.deepEqual(reqs[2]!.body.messages, (await history(s.id)).slice(0, -1));
  });

  it('a PATCH of system mid-run takes effect on a new thread from the next turn', async () => {
    let sessionId = '';
    h.fake.setHandler(async (_req, index) => {
      if (index === 0) return toolCall('calculate_sum', { a: 1, b: 1 });
      if (index === 1) {
        // Lands while the run is in flight, before this turn's reply: the next turn boundary takes it.
        const p = await h.api.req('PATCH', `/v1/sessions/${sessionId}`, { params: { system: 'Be terse.' } });
        assert.equal(p.status, 200);
        return toolCall('calculate_sum', { a: 2, b: 2 });
      }
      return text('Done.');
    });
    const created = h.api.post('/v1/sessions', {
      tools: ['calculate_sum'],
      input: 'Add',
      system: 'Be brief.',
      start: false,
    });
    sessionId = (await created).body.id;
    assert.equal((await h.api.post(`/v1/sessions/${sessionId}/messages`, { text: 'Go' })).status, 202);
    const done = await h.api.waitStatus(sessionId, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const reqs = h.fake.requests;
    assert.equal(reqs.length, 3);
    assert.equal(reqs[1]!.system, 'Be brief.');
    assert.deepEqual(threadOf(reqs[2]!), { type: 'create' });
    assert.equal(reqs[2]!.body.system, 'Be terse.');
    assert.deepEqual(reqs[2]!.body.messages, (await history(sessionId)).slice(0, -1));
  });
});

describe('an upstream without message threads', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ fake: { threads: false } });
  });
  after(async () => h.close());

  it('the runner goes on without a thread, sending the whole history each turn', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }),
      toolCall('calculate_sum', { a: 2, b: 2 }),
      text('Done.'),
    );
    const r = await h.api.post('/v1/sessions', { tools: ['calculate_sum'], input: 'Add' });
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const ok = h.fake.requests.filter((x) => x.status === 200);
    assert.equal(ok.length, 3);
    for (const x of ok) assert.equal(x.body.thread, undefined);
    assert.equal(ok[2]!.body.messages.length, 5);
  });
});
