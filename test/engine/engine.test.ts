import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';

describe('sessions engine', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  for (const stream of [true, false]) {
    it(`runs two sequential tool calls and a parallel pair to end_turn (stream: ${stream})`, async () => {
      h.fake.enqueue(
        toolCall('calculate_sum', { a: 1, b: 2 }),
        toolCall('get_weather', { location: 'Paris' }),
        toolCalls([toolUse('calculate_sum', { a: 3, b: 4 }), toolUse('get_weather', { location: 'Tokyo' })]),
        text('All done.'),
      );
      const created = await h.api.post('/v1/sessions', {
        input: 'Do things',
        tools: ['calculate_sum', 'get_weather'],
        stream,
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      assert.equal(created.headers.get('etag'), `"${created.body.revision}"`);
      const done = await h.api.waitStatus(created.body.id, ['idle', 'failed']);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      assert.equal(done.stop_reason, 'end_turn');
      assert.equal(done.iteration, 4);
      assert.equal(h.fake.requests.length, 4);
      const msgs = (await h.api.get(`/v1/sessions/${created.body.id}/messages`)).body.data;
      const lastReq = h.fake.requests.at(-1)!;
      assert.deepEqual(msgs.slice(0, -1), lastReq.messages);
      assert.equal(msgs.at(-1).role, 'assistant');
      assert.equal(msgs.at(-1).content[0].text, 'All done.');
      // Message threads: the first turn creates the thread with the whole history, later turns of the run send
      // only what the history gained since the reply they continue (test/engine/threads.test.ts).
      assert.equal(h.fake.requests[0]!.body.thread?.type, 'create');
      assert.equal(lastReq.body.thread?.type, 'continue');
      assert.equal(lastReq.body.messages.length, 1, 'the last tool results only');
      // the parallel pair answered in one user turn, in the model's order
      const pair = msgs[6];
      assert.equal(pair.role, 'user');
      assert.deepEqual(
        pair.content.map((b: any) => b.type),
        ['tool_result', 'tool_result'],
      );
      assert.equal(pair.content[0].content, '7');
      const iters = (await h.api.get(`/v1/sessions/${created.body.id}/iterations`)).body.data;
      assert.equal(iters.length, 4);
      for (const it of iters) assert.ok(it.usage.input_tokens > 0 && it.usage.output_tokens > 0);
      const sum = iters.reduce((a: number, it: any) => a + it.usage.output_tokens, 0);
      assert.equal(done.usage.output_tokens, sum);
    });
  }

  it('a claim slower than its start’s due delay is not swept and claimed again here', async () => {
    const { runs } = h.service.app.store;
    const claim = runs.claim.bind(runs);
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let target = '';
    const claims: string[] = [];
    runs.claim = async (id, ...rest) => {
      claims.push(id);
      if (id === target) await held;
      return claim(id, ...rest);
    };
    try {
      h.fake.enqueue(text('Done.'));
      const made = await h.api.post('/v1/sessions', { input: 'x', start: false });
      target = made.body.id;
      assert.equal((await h.api.post(`/v1/sessions/${target}/messages`, { text: 'Go.' })).status, 202);
      // The run is due 2 s after its start (runs:due); hold its claim until a sweep has passed over it.
      const redis = h.service.app.redis;
      for (let i = 0; i < 100; i++) {
        const [score] = await redis.zmscore('runs:due', target);
        const [s, us] = await redis.time();
        if (score !== null && Number(score) < Number(s) * 1000 + Number(us) / 1000 - 1500) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      release();
      const done = await h.api.waitStatus(target, ['idle', 'failed']);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      assert.deepEqual(
        claims.filter((id) => id === target),
        [target],
        'claimed once: the sweep passed over the run being claimed',
      );
    } finally {
      runs.claim = claim;
      release();
    }
  });

  it('a kick while a claim that fails is in flight claims again after it, though no due entry is left', async () => {
    const { app } = h.service;
    const { runs } = app.store;
    const claim = runs.claim.bind(runs);
    let target = '';
    runs.claim = async (id, owner, ttl) => {
      if (id !== target) return claim(id, owner, ttl);
      target = '';
      // Another owner still holds the lease (finishing elsewhere): this claim is refused.
      const other = (await claim(id, 'owner-finishing-elsewhere', 60_000))!;
      const mine = await claim(id, owner, ttl);
      assert.equal(mine, null);
      // Meanwhile a kick here (a message, a result), then the other owner's release and its late end, which
      // clears the run's due entry: nothing but this process's own kick is left to claim the run.
      app.engine.kick(id);
      await runs.release(id, 'owner-finishing-elsewhere', other.fence);
      await app.redis.zrem('runs:due', id);
      return mine;
    };
    try {
      h.fake.enqueue(text('Done.'));
      const made = await h.api.post('/v1/sessions', { input: 'x', start: false });
      target = made.body.id;
      const id = target;
      assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Go.' })).status, 202);
      const done = await h.api.waitStatus(id, ['idle', 'failed'], 8_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
    } finally {
      runs.claim = claim;
    }
  });
});
