/**
 * A write that drops or replaces a session's pending step (`PUT …/messages`, `retry`, an action deadline's `fail`)
 * cancels the step's tool tasks after it lands (`dropTasks`, with the session as read before the write). A step that
 * then calls the same tool_use ids — the history put back with the same reply, a retry whose reply repeats its ids,
 * the failed step resumed and answered — is run by a run that may reach the queue before that drop: it must not park
 * on the dropped step's task, which the drop then cancels (the session would wait for good: status `running`,
 * nothing offered, nothing to wake it). Its calls are queued as tasks of their own (their next round), and the drop
 * cancels only the old one.
 *
 * Each case holds the drop's cancel (the settle script) until the new run has parked: no timing.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { askUser, workerTool } from '../fixtures/tool-tasks.js';
import { gate } from '../helpers/promises.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';

/** The tasks of `tool` a claim gets within `waitMs`. */
async function claim(api: Api, tool: string, waitMs: number): Promise<any[]> {
  const c = await api.post('/v1/tool-tasks/claim', {
    tools: [tool],
    wait_ms: waitMs,
    worker_id: 'w-dropped',
  });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  return c.body.tasks as any[];
}

describe('a step that reuses the call ids of the step its write drops', { timeout: 240_000 }, () => {
  let h: Harness;
  let a: Api;
  before(async () => {
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-a',
        TOOL_TASK_LEASE_MS: '5000',
        ACTION_TIMEOUT_MIN_S: '1',
        DEADLINE_SWEEP_MS: '50',
      },
    });
    a = h.api;
    assert.equal((await a.req('PUT', '/v1/tools/stock_check', workerTool)).status, 201);
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  /**
   * Holds the unconditional cancel of `call` (a drop's: no `wanted` given) until `letGo`; `atDrop` opens when it is
   * reached, `dropped` once it is done. `parked` opens when a run of the session gives its lease up parked on its tasks (`runs.park`).
   * Restored by `release`.
   */
  function holdDrop(call: () => string) {
    const redis = (h.service.app as any).toolTasks.queue.redis;
    const store = h.service.app.store as any;
    const settle = redis.ttSettle;
    const park = store.runs.park;
    const atDrop = gate();
    const letGo = gate();
    const dropped = gate();
    const parked = gate();
    let holding = true;
    redis.ttSettle = async function (this: unknown, ...args: unknown[]) {
      if (holding && args[9] === call() && args[10] === 'cancelled' && args[13] === '') {
        holding = false;
        atDrop.open();
        await letGo.wait;
        const r = await settle.apply(this, args);
        dropped.open();
        return r;
      }
      return settle.apply(this, args);
    };
    store.runs.park = async function (this: unknown, ...args: unknown[]) {
      const done = await park.apply(this, args);
      parked.open();
      return done;
    };
    return {
      atDrop,
      letGo,
      dropped,
      parked,
      release() {
        letGo.open();
        redis.ttSettle = settle;
        store.runs.park = park;
      },
    };
  }

  /** The tool_result blocks the fake was last sent. */
  const lastResults = () =>
    (h.fake.requests.at(-1)!.messages.at(-1)!.content as any[])
      .filter((b: any) => b.type === 'tool_result')
      .map((b: any) => [b.tool_use_id, b.content]);

  /**
   * The dropped step's task (round 0) was cancelled, the call was offered anew at round 1, and its result ends the
   * run.
   */
  async function deliveredAnew(id: string, content: string): Promise<void> {
    const queue = (h.service.app as any).toolTasks.queue;
    assert.equal((await queue.record('acme', `${id}:toolu_w#0`))?.rec.state, 'cancelled');
    const tasks = await claim(a, 'stock_check', 5000);
    const now = (await a.get(`/v1/sessions/${id}`)).body;
    assert.equal(tasks.length, 1, `one task offered (session ${now.status}): ${JSON.stringify(tasks)}`);
    assert.equal(tasks[0].tool_use_id, 'toolu_w');
    assert.equal((await queue.record('acme', `${id}:toolu_w#1`))?.rec.state, 'leased', 'its next round');
    assert.equal((await a.post(`/v1/tool-tasks/${tasks[0].id}/result`, { content })).status, 200);
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
  }

  it('PUT …/messages back to the same reply, then continue before the drop: the call is queued anew', async () => {
    h.fake.enqueue(toolCalls([toolUse('stock_check', { item: 'hats' }, 'toolu_w')]), text('Hats: 7.'));
    // The first run fails after queueing its task (its `runs.park` throws once): the session is failed with
    // the task out, as a failed step keeps it for `resume`.
    const store = h.service.app.store as any;
    const park = store.runs.park;
    let failOnce = true;
    store.runs.park = async function (this: unknown, ...args: unknown[]) {
      if (failOnce) {
        failOnce = false;
        throw new Error('injected: the run fails after queueing its task');
      }
      return park.apply(this, args);
    };
    let id: string;
    try {
      id = (await a.post('/v1/sessions', { input: 'Hats?', tools: ['stock_check'] })).body.id as string;
      assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'failed');
    } finally {
      store.runs.park = park;
    }
    const queue = (h.service.app as any).toolTasks.queue;
    const first = `${id}:toolu_w#0`;
    assert.equal((await queue.record('acme', first))?.rec.state, 'queued');
    const messages = ((await a.get(`/v1/sessions/${id}/messages`)).body.data as unknown[]).slice(0, 2);

    const hold = holdDrop(() => first);
    try {
      // The history put back as it is (the reply's call unanswered): its write lands, its drop is held.
      const putting = a.req('PUT', `/v1/sessions/${id}/messages`, { messages });
      await hold.atDrop.wait;
      // A run of the rebuilt step, before the drop: it queues the call and parks.
      const go = await a.post(`/v1/sessions/${id}/continue`);
      assert.equal(go.status, 202, JSON.stringify(go.body));
      await hold.parked.wait;
      hold.letGo.open();
      const put = await putting;
      assert.equal(put.status, 200, JSON.stringify(put.body));
    } finally {
      hold.release();
    }
    await deliveredAnew(id, 'hats: 7');
    assert.deepEqual(lastResults(), [['toolu_w', 'hats: 7']]);
  });

  it('retry whose reply repeats the dropped reply’s call id, its run parked before the drop: queued anew', async () => {
    // The first reply waits for its client too, its worker call queued meanwhile; the retry's reply (the fake
    // repeats the id, as a replaying upstream would) calls the worker tool alone: its run parks.
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which size?' }, 'toolu_client'),
        toolUse('stock_check', { item: 'boots' }, 'toolu_w'),
      ]),
      toolCalls([toolUse('stock_check', { item: 'boots' }, 'toolu_w')]),
      text('Boots: 2.'),
    );
    const id = (await a.post('/v1/sessions', { input: 'Boots?', tools: [askUser, 'stock_check'] })).body
      .id as string;
    assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'requires_action');
    const queue = (h.service.app as any).toolTasks.queue;
    const first = `${id}:toolu_w#0`;
    assert.equal((await queue.record('acme', first))?.rec.state, 'queued');

    const hold = holdDrop(() => first);
    try {
      const retrying = a.post(`/v1/sessions/${id}/retry`);
      await hold.atDrop.wait;
      await hold.parked.wait;
      hold.letGo.open();
      const r = await retrying;
      assert.equal(r.status, 202, JSON.stringify(r.body));
    } finally {
      hold.release();
    }
    await deliveredAnew(id, 'boots: 2');
    assert.deepEqual(lastResults(), [['toolu_w', 'boots: 2']]);
  });

  it('on_action_timeout fail, then resume and the client’s answer before its drop: the call is queued anew', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which colour?' }, 'toolu_client'),
        toolUse('stock_check', { item: 'scarf' }, 'toolu_w'),
      ]),
      text('A red scarf: 4.'),
    );
    let id = '';
    // The deadline's write fails the session (its step kept for `resume`); its drop of the step's task is held.
    const hold = holdDrop(() => `${id}:toolu_w#0`);
    try {
      const created = await a.post('/v1/sessions', {
        input: 'Scarf?',
        tools: [askUser, 'stock_check'],
        action_timeout_s: 1,
        on_action_timeout: 'fail',
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      id = created.body.id as string;
      await hold.atDrop.wait;
      const failed = (await a.get(`/v1/sessions/${id}`)).body;
      assert.equal(failed.status, 'failed', JSON.stringify(failed));
      // Resumed and answered before the drop lands: the step waits for its client again, then its run parks.
      assert.equal((await a.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: null })).status, 200);
      assert.equal((await a.post(`/v1/sessions/${id}/resume`)).status, 202);
      assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'requires_action');
      const answered = await a.post(`/v1/sessions/${id}/tool-results`, {
        results: [{ tool_use_id: 'toolu_client', content: 'red' }],
      });
      assert.equal(answered.status, 202, JSON.stringify(answered.body));
      await hold.parked.wait;
      hold.letGo.open();
      await hold.dropped.wait;
    } finally {
      hold.release();
    }
    await deliveredAnew(id, 'scarves: 4');
    assert.deepEqual(lastResults(), [
      ['toolu_client', 'red'],
      ['toolu_w', 'scarves: 4'],
    ]);
  });
});
