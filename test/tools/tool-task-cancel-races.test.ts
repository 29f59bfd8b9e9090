/**
 * A tenant tool's task is cancelled when its session no longer waits for it, and kept while it does, whatever lands
 * between the read that decides and the write that cancels:
 * - a claim (or heartbeat, result, refusal) reads the session `failed` and cancels the task: a `resume` between that
 *   read and the cancel makes a run that queues the call again (`known`: still leased) and parks on it. The cancel
 *   must not take the task from under that run (it would wait for good: nothing offered, nothing to wake it); but
 *   a cancel of the session landing before it makes the task cancelled for good, and the claim gives nothing out.
 * - a cancel of a run that holds its lease while a task queued at `requires_action` is out: the task leaves the
 *   queue with the cancel, as a cancel without a live run does (docs/API.md §7.5); and a cancel asked while the
 *   run ends waiting for its client (that end clears the request) is committed by the route, tasks dropped after.
 * Each case holds one write at a gate (a wrapped method) until the other side has happened: no timing.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { workerTool } from '../fixtures/tool-tasks.js';
import { gate } from '../helpers/promises.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';

describe('a tool task cancelled while its session moves on', { timeout: 240_000 }, () => {
  let h: Harness;
  let a: Api;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TOOL_TASK_LEASE_MS: '3000' } });
    a = h.api;
    assert.equal((await a.req('PUT', '/v1/tools/stock_check', workerTool)).status, 201);
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  // `answered`: the session resumed while a claim cancels its task gets the task, not a park for good. `cancelled`:
  // cancelled too before the claim's cancel lands, it stays so: that cancel, refused for the run's new `wanted`
  // alone, must not give the task out.
  for (const ending of ['answered', 'cancelled'] as const)
    it(`a session resumed while a claim cancels its task (then ${ending})`, async () => {
      h.fake.enqueue(
        toolCalls([toolUse('stock_check', { item: 'hats' }, 'toolu_w')]),
        text('Hats are in stock.'),
      );
      const store = h.service.app.store as any;
      const park = store.runs.park;
      let failOnce = true;
      let parked: (() => void) | null = null;
      // The first run fails after queueing its task (its `runs.park` throws once); the resumed run's park is the
      // moment the claim's cancel is let go.
      store.runs.park = async function (this: unknown, ...args: unknown[]) {
        if (failOnce) {
          failOnce = false;
          throw new Error('injected: the run fails after queueing its task');
        }
        const done = await park.apply(this, args);
        if (parked) parked();
        return done;
      };
      const id = (await a.post('/v1/sessions', { input: 'Hats?', tools: ['stock_check'] })).body.id as string;
      try {
        assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'failed');

        // The claim reads the session `failed` and cancels the task: that cancel (the settle script) is held.
        const redis = (h.service.app as any).toolTasks.queue.redis;
        const settle = redis.ttSettle;
        const atCancel = gate();
        const letGo = gate();
        let holding = true;
        redis.ttSettle = async function (this: unknown, ...args: unknown[]) {
          if (args[10] === 'cancelled' && holding) {
            holding = false;
            atCancel.open();
            await letGo.wait;
          }
          return settle.apply(this, args);
        };
        const resumedParked = gate();
        try {
          const claiming = a.post('/v1/tool-tasks/claim', {
            tools: ['stock_check'],
            wait_ms: 0,
            worker_id: 'w',
          });
          await atCancel.wait;
          // Resumed now: its run queues the call (still leased: `known`) and parks on it.
          parked = resumedParked.open;
          assert.equal((await a.post(`/v1/sessions/${id}/resume`)).status, 202);
          await resumedParked.wait;
          if (ending === 'cancelled') {
            const c = await a.post(`/v1/sessions/${id}/cancel`);
            assert.equal(c.body.status, 'idle', JSON.stringify(c.body));
            letGo.open();
            const held = await claiming;
            assert.equal(held.status, 200, JSON.stringify(held.body));
            assert.deepEqual(held.body.tasks, [], 'a task of a cancelled session was given out');
            assert.deepEqual(await claimed(a), []);
            return;
          }
          letGo.open();
          const held = await claiming;
          assert.equal(held.status, 200, JSON.stringify(held.body));
          // The held claim gives the task out (the session waits for it again); else a claim after it is offered it.
          let task = (held.body.tasks as any[])[0];
          if (!task) {
            const c = await a.post('/v1/tool-tasks/claim', {
              tools: ['stock_check'],
              wait_ms: 5000,
              worker_id: 'w2',
            });
            task = (c.body.tasks as any[])[0];
          }
          const now = (await a.get(`/v1/sessions/${id}`)).body;
          assert.ok(task, `the resumed session waits for a task no one is offered: status ${now.status}`);
          const r = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'in stock: 7' });
          assert.equal(r.status, 200, JSON.stringify(r.body));
        } finally {
          redis.ttSettle = settle;
        }
        const done = await a.waitStatus(id, ['idle', 'failed']);
        assert.equal(done.status, 'idle', JSON.stringify(done));
        const sent = h.fake.requests.at(-1)!.messages.at(-1)!.content as any[];
        assert.deepEqual(
          sent.filter((b: any) => b.type === 'tool_result').map((b: any) => [b.tool_use_id, b.content]),
          [['toolu_w', 'in stock: 7']],
        );
      } finally {
        store.runs.park = park;
        parked = null;
      }
    });

  it('a cancel of a run holding its lease drops the task queued while the client was asked', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('calculate_sum', { a: 40, b: 2 }, 'toolu_sum'),
        toolUse('stock_check', { item: 'hats' }, 'toolu_hats'),
      ]),
      text('Done.'),
    );
    const id = (
      await a.post('/v1/sessions', {
        input: 'Sum and hats?',
        tools: ['calculate_sum', 'stock_check'],
        approval: ['calculate_sum'],
      })
    ).body.id as string;
    assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'requires_action');
    const queue = (h.service.app as any).toolTasks.queue;
    const call = `${id}:toolu_hats#0`;
    assert.equal((await queue.record('acme', call))?.rec.state, 'queued');
    const store = h.service.app.store as any;
    const apply = store.apply;
    const publish = store.publishControl;
    const atStarted = gate();
    const asked = gate();
    const letGo = gate();
    // The approved server call "runs" (its `tool.started` write held) while the cancel asks the run to stop.
    store.apply = async function (this: unknown, sid: string, guard: any, ops: any, ...rest: unknown[]) {
      if (sid === id && guard?.fence && (ops.events ?? []).some((e: string[]) => e[0] === 'tool.started')) {
        atStarted.open();
        await letGo.wait;
      }
      return apply.call(this, sid, guard, ops, ...rest);
    };
    store.publishControl = async function (this: unknown, sid: string, ...rest: unknown[]) {
      const r = await publish.call(this, sid, ...rest);
      if (sid === id) asked.open();
      return r;
    };
    try {
      assert.equal(
        (await a.post(`/v1/sessions/${id}/tool-calls/toolu_sum`, { decision: 'approve' })).status,
        202,
      );
      await atStarted.wait;
      assert.equal(await store.runs.leaseHolder(id).then(Boolean), true);
      const cancelling = a.post(`/v1/sessions/${id}/cancel`);
      await asked.wait;
      letGo.open();
      const c = await cancelling;
      assert.equal(c.status, 200, JSON.stringify(c.body));
      assert.equal(c.body.status, 'idle', JSON.stringify(c.body));
    } finally {
      store.apply = apply;
      store.publishControl = publish;
    }
    assert.equal((await queue.record('acme', call))?.rec.state, 'cancelled');
    assert.deepEqual(await claimed(a), []);
  });

  it('a cancel asked while the run ends waiting for its client cancels the session, and only then its tasks', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which colour?' }, 'toolu_ask'),
        toolUse('stock_check', { item: 'gloves' }, 'toolu_gloves'),
      ]),
      text('Done.'),
    );
    const store = h.service.app.store as any;
    const apply = store.apply;
    const publish = store.publishControl;
    const atEnd = gate();
    const asked = gate();
    const letGo = gate();
    let id = '';
    // The run's last write (requires_action, after its task was queued) is held until the cancel has asked the
    // run to stop; that write then lands, clearing the request, so the owner never sees it.
    store.apply = async function (this: unknown, sid: string, guard: any, ops: any, ...rest: unknown[]) {
      if (sid === id && guard?.fence && ops.hset?.status === 'requires_action') {
        atEnd.open();
        await letGo.wait;
      }
      return apply.call(this, sid, guard, ops, ...rest);
    };
    store.publishControl = async function (this: unknown, sid: string, ...rest: unknown[]) {
      const r = await publish.call(this, sid, ...rest);
      if (sid === id) asked.open();
      return r;
    };
    const queue = (h.service.app as any).toolTasks.queue;
    try {
      const askUser = { name: 'ask_user', description: 'Ask the user.', input_schema: { type: 'object' } };
      const created = await a.post('/v1/sessions', {
        input: 'Gloves?',
        tools: [askUser, 'stock_check'],
        start: false,
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      id = created.body.id as string;
      assert.equal((await a.post(`/v1/sessions/${id}/messages`, { content: 'Gloves?' })).status, 202);
      await atEnd.wait;
      assert.equal((await queue.record('acme', `${id}:toolu_gloves#0`))?.rec.state, 'queued');
      const cancelling = a.post(`/v1/sessions/${id}/cancel`);
      await asked.wait;
      letGo.open();
      const c = await cancelling;
      assert.equal(c.status, 200, JSON.stringify(c.body));
      assert.equal(c.body.status, 'idle', JSON.stringify(c.body));
    } finally {
      store.apply = apply;
      store.publishControl = publish;
    }
    assert.equal((await queue.record('acme', `${id}:toolu_gloves#0`))?.rec.state, 'cancelled');
    const s = await a.get(`/v1/sessions/${id}`);
    assert.equal(s.body.stop_reason, 'cancelled', JSON.stringify(s.body));
    assert.deepEqual(await claimed(a), []);
  });
});

/** The stock_check tasks offered now. */
async function claimed(api: Api): Promise<unknown[]> {
  const c = await api.post('/v1/tool-tasks/claim', { tools: ['stock_check'], wait_ms: 0, worker_id: 'w3' });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  return c.body.tasks as unknown[];
}
