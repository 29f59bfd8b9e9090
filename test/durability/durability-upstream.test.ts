/**
 * Upstream faults: 429/529/500 go through the SDK's retries (UPSTREAM_MAX_RETRIES, honouring retry-after); once they
 * are exhausted the session is `failed` with a retryable error and `resume` carries on; a stream cut mid-turn is sent
 * again (twice) or fails the same way; a partial reply never lands in the history.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { overloaded, rateLimited, serverError, text, toolCall, type FakeReply } from '../fake/server.js';
import { checkHistory } from '../../src/history.js';
import { startHarness, type Harness } from '../helpers/service.js';

const MAX_RETRIES = 2;

describe('upstream faults', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { UPSTREAM_MAX_RETRIES: String(MAX_RETRIES) } });
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  const history = async (id: string) => (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
  const start = async (extra: Record<string, unknown> = {}) => {
    const res = await h.api.post('/v1/sessions', { input: 'Go.', tools: ['calculate_sum'], ...extra });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.id as string;
  };

  it('honours retry-after on a 429 and succeeds within the SDK retries', async () => {
    h.fake.enqueue(rateLimited(1), text('after the wait'));
    const id = await start();
    const done = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(h.fake.requests.length, 2);
    const gap = h.fake.requests[1]!.at - h.fake.requests[0]!.at;
    assert.ok(gap >= 900, `retried after ${gap} ms (retry-after: 1)`);
    assert.equal((await history(id)).length, 2);
  });

  const exhausted: Array<[string, () => FakeReply, string]> = [
    ['429', () => rateLimited(undefined, { retryAfterMs: 20 }), 'upstream_rate_limited'],
    ['529', () => overloaded({ retryAfterMs: 20 }), 'upstream_overloaded'],
    ['500', () => serverError({ retryAfterMs: 20 }), 'upstream_error'],
  ];
  for (const [status, reply, code] of exhausted) {
    it(`fails with ${code} (retryable) once the SDK's retries of ${status} are exhausted; resume carries on`, async () => {
      // Turn 1 succeeds, turn 2 fails every attempt.
      h.fake.enqueue(
        toolCall('calculate_sum', { a: 1, b: 2 }),
        ...Array.from({ length: MAX_RETRIES + 1 }, reply),
      );
      const id = await start();
      const failed = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
      assert.equal(failed.status, 'failed');
      assert.equal(failed.error.code, code);
      assert.equal(failed.error.retryable, true);
      assert.equal(h.fake.requests.length, 1 + MAX_RETRIES + 1, 'one turn, then 1 + retries attempts');
      const kept = await history(id);
      assert.deepEqual(
        kept.map((m: any) => m.role),
        ['user', 'assistant', 'user'],
        'the first turn and its result are kept',
      );
      const events = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
      assert.ok(events.some((e: any) => e.type === 'session.error' && e.data.code === code));

      h.fake.enqueue(text('recovered'));
      const resumed = await h.api.post(`/v1/sessions/${id}/resume`);
      assert.equal(resumed.status, 202, JSON.stringify(resumed.body));
      const done = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      assert.equal(done.error, null);
      const final = await history(id);
      assert.deepEqual(checkHistory(final), []);
      assert.deepEqual(
        final.map((m: any) => m.role),
        ['user', 'assistant', 'user', 'assistant'],
      );
      assert.deepEqual(h.fake.requests.at(-1)!.messages, kept, 'resume sends the kept history');
    });
  }

  it('sends a turn whose stream was cut again; the partial reply never lands', async () => {
    h.fake.enqueue(
      { ...toolCall('calculate_sum', { a: 40, b: 2 }, { id: 'toolu_cut' }), cutAfterEvents: 4 },
      toolCall('calculate_sum', { a: 40, b: 2 }, { id: 'toolu_whole' }),
      text('42'),
    );
    const id = await start();
    const done = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.iteration, 2);
    const final = await history(id);
    assert.deepEqual(checkHistory(final), []);
    assert.equal(final.length, 4);
    assert.equal(final[1].content[0].id, 'toolu_whole');
    assert.ok(!JSON.stringify(final).includes('toolu_cut'));
    // The second attempt sent the same history as the first.
    assert.deepEqual(h.fake.requests[1]!.messages, h.fake.requests[0]!.messages);
    // The cut attempt's streamed events are in the log, marked dropped before the turn is sent again.
    const turns = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data
      .filter((e: any) => e.type === 'turn.started' || e.type === 'turn.dropped')
      .map((e: any) => [e.type, e.data.iteration, e.data.reason]);
    assert.deepEqual(turns.slice(0, 3), [
      ['turn.started', 1, undefined],
      ['turn.dropped', 1, 'stream_cut'],
      ['turn.started', 1, undefined],
    ]);
  });

  it('fails with upstream_error after the stream is cut three times; resume carries on', async () => {
    const cut = (n: number): FakeReply => ({ ...text(`partial ${n} of a longer reply`), cutAfterEvents: 3 });
    h.fake.enqueue(cut(1), cut(2), cut(3));
    const id = await start();
    const failed = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, 'upstream_error');
    assert.equal(failed.error.retryable, true);
    assert.equal(h.fake.requests.length, 3, 'the turn and two more attempts');
    assert.deepEqual(
      (await history(id)).map((m: any) => m.role),
      ['user'],
      'no partial reply',
    );
    h.fake.enqueue(text('whole'));
    assert.equal((await h.api.post(`/v1/sessions/${id}/resume`)).status, 202);
    const done = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
    assert.equal(done.status, 'idle');
    const final = await history(id);
    assert.equal(final.length, 2);
    assert.equal(final[1].content[0].text, 'whole');
    assert.ok(!JSON.stringify(final).includes('partial'));
  });

  it('retries a connection dropped before the response (SDK retry)', async () => {
    h.fake.enqueue({ ...text('never sent'), cutAfterEvents: 0 }, text('second try'));
    const id = await start({ stream: false });
    const done = await h.api.waitStatus(id, ['idle', 'failed'], 10_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal((await history(id))[1].content[0].text, 'second try');
  });
});
