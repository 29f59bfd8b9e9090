/**
 * The deadline sweep when it comes late, or finds many deadlines due at once, and the warning's place among the
 * session's changes. The service's own sweep is off (DEADLINE_SWEEP_MS of an hour): each pass here is one
 * `DeadlineSweeper.sweep()` the test calls once Redis's clock (the one deadlines are written in and fired by) has
 * passed what it waits for, so what a pass does is counted in passes, not in seconds of a busy machine.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall } from '../fake/script.js';
import { DeadlineSweeper } from '../../src/sessions/deadlines.js';

interface Ev {
  type: string;
  revision: number | null;
  data: { tool_use_ids?: string[]; expires_at?: string };
}

const env = {
  ACTION_TIMEOUT_MIN_S: '1',
  DEADLINE_SWEEP_MS: '3600000',
  TENANT_MAX_ACTIVE_RUNS: '1000',
  RATE_LIMIT_PER_MIN: '0',
};

describe('the deadline sweep, late or with many due', { timeout: 180_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env });
  });
  after(async () => h?.close());

  const redisNow = async () => {
    const [sec, us] = await h.service.app.redis.time();
    return Number(sec) * 1000 + Math.floor(Number(us) / 1000);
  };
  /** Waits until Redis's clock reaches `at` (ms): the condition a sweep compares deadlines with. */
  const reach = async (at: number) => {
    while ((await redisNow()) < at) await new Promise((res) => setTimeout(res, 25));
  };
  /** One pass of a deadline sweep, as any replica's. */
  const pass = () => {
    const app = h.service.app;
    return new DeadlineSweeper(app.sessionDeps, app.log, 60_000).sweep();
  };
  const events = async (id: string): Promise<Ev[]> =>
    (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
  const deadlineEvents = async (id: string) =>
    (await events(id)).filter((e) => e.type === 'action.expiring' || e.type === 'action.timed_out');

  /** A session waiting for the approval of `call` with a deadline of `timeoutS`, and what it waits with. */
  async function approval(call: string, timeoutS: number, onTimeout: 'deny' | 'fail' = 'deny') {
    const created = await h.api.post('/v1/sessions', {
      input: 'Weather in Oslo?',
      tools: ['get_weather'],
      approval: 'always',
      action_timeout_s: timeoutS,
      on_action_timeout: onTimeout,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const waiting = await h.api.waitStatus(id, 'requires_action');
    assert.deepEqual(
      waiting.required_action.tool_calls.map((c: { id: string }) => c.id),
      [call],
    );
    return { id, waiting };
  }

  it('a deadline first swept after it passed: action.expiring is written, then action.timed_out, once, with two sweeps at once', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: 'toolu_late' }), text('No weather.'));
    const { id, waiting } = await approval('toolu_late', 1);
    // No pass ran across the 80 % mark (every replica down, say): the first comes after the deadline, two at once.
    await reach(Date.parse(waiting.required_action.expires_at));
    await Promise.all([pass(), pass()]);
    const evs = await deadlineEvents(id);
    assert.deepEqual(
      evs.map((e) => e.type),
      ['action.expiring', 'action.timed_out'],
    );
    const [expiring, timedOut] = evs as [Ev, Ev];
    assert.deepEqual(expiring.data.tool_use_ids, ['toolu_late']);
    assert.equal(expiring.data.expires_at, waiting.required_action.expires_at);
    // Told in the timeout's write: the same change.
    assert.equal(expiring.revision, timedOut.revision);
    await h.api.waitStatus(id, 'idle');
    // A pass after it finds nothing more to tell.
    await pass();
    assert.equal((await deadlineEvents(id)).length, 2);
  });

  it('many deadlines due at once: one pass warns and times out every one, warning first', async () => {
    // More than a pass read at a time (100).
    const n = 150;
    h.fake.enqueue(
      ...Array.from({ length: n }, (_, i) =>
        toolCall('get_weather', { location: 'Oslo' }, { id: `toolu_m${i}` }),
      ),
    );
    const sessions: Array<{ id: string; expiresAt: number }> = [];
    for (let i = 0; i < n; i += 25) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(25, n - i) }, async () => {
          const r = await h.api.post('/v1/sessions', {
            input: 'Weather in Oslo?',
            tools: ['get_weather'],
            approval: 'always',
            action_timeout_s: 1,
            on_action_timeout: 'fail',
          });
          assert.equal(r.status, 201, JSON.stringify(r.body));
          const w = await h.api.waitStatus(r.body.id, 'requires_action');
          return { id: r.body.id as string, expiresAt: Date.parse(w.required_action.expires_at) };
        }),
      );
      sessions.push(...batch);
    }
    await reach(Math.max(...sessions.map((s) => s.expiresAt)));
    await pass();
    const missed: string[] = [];
    for (const s of sessions) {
      const types = (await deadlineEvents(s.id)).map((e) => e.type).join(' ');
      const got = (await h.api.get(`/v1/sessions/${s.id}`)).body;
      const timedOut = got.status === 'failed' && got.error?.code === 'action_timed_out';
      if (types !== 'action.expiring action.timed_out' || !timedOut)
        missed.push(`${s.id} ${got.status}: ${types}`);
    }
    assert.deepEqual(missed, [], `${missed.length} of ${n} not warned then timed out by one pass`);
  });

  it('action.expiring moves no revision: an answer with the If-Match read at requires_action is taken after it', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: 'toolu_im' }), text('Sunny.'));
    // 10 s: the warning at 8 s leaves 2 s for the pass and the answer before the deadline.
    const { id, waiting } = await approval('toolu_im', 10);
    const before = await h.api.get(`/v1/sessions/${id}`);
    const etag = before.headers.get('etag')!;
    assert.equal(etag, `"${waiting.revision}"`);
    const expiresAt = Date.parse(waiting.required_action.expires_at);
    await reach(expiresAt - 2_000);
    await pass();
    const evs = await deadlineEvents(id);
    assert.deepEqual(
      evs.map((e) => e.type),
      ['action.expiring'],
    );
    // Written outside a change: no revision, as the events that change no session field.
    assert.equal(evs[0]!.revision, null);
    const now = await h.api.get(`/v1/sessions/${id}`);
    assert.equal(now.headers.get('etag'), etag);
    assert.equal(now.body.revision, waiting.revision);
    assert.equal(now.body.updated_at, before.body.updated_at);
    const decided = await h.api.post(
      `/v1/sessions/${id}/tool-calls/toolu_im`,
      { decision: 'approve' },
      { 'if-match': etag },
    );
    assert.ok((await redisNow()) < expiresAt, 'answered before the deadline');
    assert.equal(decided.status, 202, JSON.stringify(decided.body));
    await h.api.waitStatus(id, 'idle');
    // The warning is not told again, and nothing times out.
    await pass();
    assert.deepEqual(
      (await deadlineEvents(id)).map((e) => e.type),
      ['action.expiring'],
    );
  });
});
