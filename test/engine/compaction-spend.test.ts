/**
 * A compaction is a model request like a turn: it is not sent once the session's budget is spent (the route refuses
 * it; a compaction left by a run that stopped for its budget is skipped), and a compaction run that follow-ups came
 * during puts them after its summary, as a user turn of their own.
 */
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { CONTEXT_COMPACTION_BETA, offlineHandler, toolCall, type FakeReply } from '../fake/server.js';
import { reply } from '../fake/script.js';
import { checkHistory } from '../../src/history.js';
import { startHarness, type Harness } from '../helpers/service.js';

/** Every scripted reply uses 150 tokens. */
const used = { input_tokens: 100, output_tokens: 50 };

describe('compaction and the budget', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  const events = async (id: string) =>
    (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as Array<{
      type: string;
      data: Record<string, unknown>;
    }>;

  /** The fake's first request waits for `release`; the others get the offline model's answer. */
  function gateFirst(first: FakeReply) {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let n = 0;
    h.fake.setHandler(async (req) => {
      if (++n > 1) return offlineHandler(req, n - 1);
      await gate;
      return first;
    });
    return release;
  }

  test('a compaction asked for during a run that then stops for its budget is skipped, not sent', async () => {
    const release = gateFirst(toolCall('calculate_sum', { a: 2, b: 3 }, { usage: used }));
    const r = await h.api.post('/v1/sessions', {
      input: 'What is 2 plus 3?',
      tools: ['calculate_sum'],
      budget: { total_tokens: 150 },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id: string = r.body.id;
    await h.fake.waitForRequests(1);
    const c = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    release();
    const done = await h.api.waitFor(id, (s) => s.status === 'idle' && !s.compaction_pending);
    assert.equal(done.stop_reason, 'budget_exhausted');
    assert.equal(h.fake.requests.length, 1, 'no compaction request after the budget was spent');
    const skipped = (await events(id)).filter((e) => e.type === 'compaction.skipped');
    assert.deepEqual(
      skipped.map((e) => e.data),
      [{ iteration: 1, n: 2, reason: 'budget_exhausted' }],
    );
    // Nothing changed: the history still ends with the tool result, valid for the API.
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.deepEqual(
      msgs.map((m: { role: string }) => m.role),
      ['user', 'assistant', 'user'],
    );
    assert.deepEqual(checkHistory(msgs), []);
    assert.equal((await h.api.get(`/v1/sessions/${id}/iterations`)).body.data.length, 1);

    // Asked for now, by the route: refused as a new message is, until the budget is raised.
    const again = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(again.status, 409, JSON.stringify(again.body));
    assert.equal(again.body.error.code, 'budget_exhausted');
    assert.equal(h.fake.requests.length, 1);
  });

  test('a message posted during a compaction run is a user turn after the summary, not part of it', async () => {
    // A failed first turn leaves the history ending with the user's turn.
    h.fake.enqueue({ type: 'error', status: 400, errorType: 'invalid_request_error', message: 'scripted' });
    const r = await h.api.post('/v1/sessions', { input: 'What is 2 plus 3?', tools: ['calculate_sum'] });
    const id: string = r.body.id;
    assert.equal((await h.api.waitStatus(id, ['idle', 'failed'])).status, 'failed');
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    h.fake.enqueue({ ...reply([{ type: 'compaction', content: 'They asked for 2 plus 3.' }]), gate });
    const before = h.fake.requests.length;
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`)).status, 202);
    await h.fake.waitForRequests(before + 1);
    const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And 4 plus 4?' });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    release();
    const done = await h.api.waitFor(id, (s) => s.status !== 'running' && !s.compaction_pending);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.equal(msgs[0].role, 'assistant');
    assert.deepEqual(
      msgs[0].content.map((b: { type: string }) => b.type),
      ['compaction'],
      'the summary holds only itself',
    );
    assert.equal(msgs[1].role, 'user');
    assert.deepEqual(msgs[1].content, [{ type: 'text', text: 'And 4 plus 4?' }]);
    assert.deepEqual(checkHistory(msgs), []);
    // The turn after the compaction asked the model the follow-up, as a user turn.
    const last = h.fake.requests.at(-1)!;
    assert.equal(last.messages.at(-1)!.role, 'user');
  });

  test('a compaction asked for during a run that fails its tool step waits for the next run, and is made there', async () => {
    const release = gateFirst(toolCall('evaluate_expression', { expression: '1/' }));
    const r = await h.api.post('/v1/sessions', {
      input: 'Evaluate 1/',
      tools: ['evaluate_expression'],
      on_tool_error: 'fail',
    });
    const id: string = r.body.id;
    await h.fake.waitForRequests(1);
    const c = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    release();
    const failed = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, 'tool_failed', 'the error of the tool step stands');
    assert.equal(failed.compaction_pending, true);
    // A compaction edit now would make the API refuse the pending compaction at every run: refused.
    const edit = await h.api.req('PATCH', `/v1/sessions/${id}`, {
      params: {
        betas: [CONTEXT_COMPACTION_BETA],
        context_management: { edits: [{ type: 'compact_20260112' }] },
      },
    });
    assert.equal(edit.status, 400, JSON.stringify(edit.body));
    assert.match(edit.body.error.message, /compaction_pending/);
    const retried = await h.api.post(`/v1/sessions/${id}/retry`, {
      params: {
        betas: [CONTEXT_COMPACTION_BETA],
        context_management: { edits: [{ type: 'compact_20260112' }] },
      },
    });
    assert.equal(retried.status, 400, JSON.stringify(retried.body));
    assert.match(retried.body.error.message, /compaction_pending/);
    // The next run answers the calls, then compacts before its first turn, and goes on from the summary. (Before,
    // the ended run's leftover compaction was sent over the calls without results: the API refused it, the session
    // failed with that error and every run after it made the same request again.)
    await h.api.req('PATCH', `/v1/sessions/${id}`, { on_tool_error: 'continue' });
    const resumed = await h.api.post(`/v1/sessions/${id}/resume`);
    assert.equal(resumed.status, 202, JSON.stringify(resumed.body));
    const done = await h.api.waitFor(id, (s) => s.status !== 'running' && !s.compaction_pending);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.deepEqual(
      h.fake.requests.map((q) => q.status),
      [200, 200, 200],
      'the turn, the compaction, the turn after it: no refused request',
    );
    const [, compaction, turn] = h.fake.requests;
    assert.deepEqual(compaction!.body.compaction, { type: 'summarize' });
    assert.equal(compaction!.messages.at(-1)!.role, 'user', 'compacted after the error result');
    assert.equal(turn!.body.compaction, undefined);
  });

  test('a compaction run that fails is made again by the next run: a message posted meanwhile joins after it', async () => {
    const s = await h.api.post('/v1/sessions', { input: 'What is 2 plus 3?', tools: ['calculate_sum'] });
    const id: string = s.body.id;
    assert.equal((await h.api.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    h.fake.enqueue({
      ...reply([{ type: 'compaction', content: 'unused' }]),
      streamErrorAfterEvents: 0,
      streamErrorType: 'invalid_request_error',
    });
    assert.equal((await h.api.post(`/v1/sessions/${id}/compact`)).status, 202);
    const failed = await h.api.waitFor(id, (x) => x.status === 'failed');
    assert.equal(failed.compaction_pending, true);
    const before = h.fake.requests.length;
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And 4 plus 4?' })).status, 202);
    const done = await h.api.waitFor(id, (x) => x.status !== 'running' && !x.compaction_pending);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const sent = h.fake.requests.slice(before);
    assert.ok(sent[0]!.body.compaction, 'the compaction first');
    // Then the model was asked the message, as the last user turn after the summary.
    const asked = sent.find((q) => !q.body.compaction);
    assert.ok(asked, 'a turn was sent after the compaction');
    assert.match(JSON.stringify(asked.messages.at(-1)), /And 4 plus 4\?/);
    const msgs = (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.notEqual(msgs.at(-1).content[0].type, 'compaction', 'the model answered the message');
    assert.deepEqual(checkHistory(msgs), []);
  });
});
