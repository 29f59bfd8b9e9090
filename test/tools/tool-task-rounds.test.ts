/**
 * A tenant tool's call is a task of the queue once per round (`<session>:<tool_use_id>#<round>`), and the record of a
 * round that was delivered or cancelled stays a day, so a second run of the same step does not queue it again. A
 * step that still waits for such a call — rebuilt from the history, or a failed step resumed — must queue it in its
 * next round, or it waits for a task no one will ever be offered:
 * - a task cancelled while the client was asked, then the step rebuilt (`PUT …/messages`, then a message);
 * - a run that fails after queueing its tasks, whose task is cancelled while the session has failed, then `resume`;
 * - a step rebuilt after its round's result was delivered (and went to the model).
 * And a round whose result is delivered while a run rewrites the step from an older read (the run that runs the
 * step's approved server call) is that round's result: the write leaves it be, and the call is not run again.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { askUser, workerTool } from '../fixtures/tool-tasks.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';

/** The tasks of `tool` a claim gets within `waitMs`. */
async function claim(api: Api, tool: string, waitMs: number): Promise<any[]> {
  const c = await api.post('/v1/tool-tasks/claim', { tools: [tool], wait_ms: waitMs, worker_id: 'w-rounds' });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  return c.body.tasks as any[];
}

/** The one task of `tool` offered within `waitMs` (asserted: a call left unqueued is offered to no one). */
async function claimOne(api: Api, tool: string, waitMs = 5000): Promise<any> {
  const tasks = await claim(api, tool, waitMs);
  assert.equal(tasks.length, 1, `one task of ${tool} offered: ${JSON.stringify(tasks)}`);
  return tasks[0];
}

describe('a tool call whose round is over is queued in its next one', { timeout: 240_000 }, () => {
  let h: Harness;
  let a: Api;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TOOL_TASK_LEASE_MS: '5000' } });
    a = h.api;
    assert.equal((await a.req('PUT', '/v1/tools/stock_check', workerTool)).status, 201);
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  /** The tool_result blocks of request `i` to the fake (its last user turn). */
  const resultsSent = (i: number) =>
    (h.fake.requests[i]!.messages.at(-1)!.content as any[])
      .filter((b: any) => b.type === 'tool_result')
      .map((b: any) => ({ tool_use_id: b.tool_use_id, content: b.content }));

  /** The session's history up to (and with) its first reply: the user turn and the calls. */
  async function upToCalls(id: string): Promise<unknown[]> {
    const msgs = (await a.get(`/v1/sessions/${id}/messages`)).body.data as unknown[];
    return msgs.slice(0, 2);
  }

  it('cancelled while the client was asked, the step rebuilt from the history queues the call anew', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which size?' }, 'toolu_client'),
        toolUse('stock_check', { item: 'boots' }, 'toolu_worker'),
      ]),
      text('Boots in 42 are in stock.'),
    );
    const id = (await a.post('/v1/sessions', { input: 'Boots?', tools: [askUser, 'stock_check'] })).body
      .id as string;
    assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'requires_action');
    const first = await claimOne(a, 'stock_check');
    // The cancel answers both calls "cancelled" and cancels the task.
    assert.equal((await a.post(`/v1/sessions/${id}/cancel`)).body.status, 'idle');
    assert.equal((await a.post(`/v1/tool-tasks/${first.id}/heartbeat`)).body.error?.code, 'task_cancelled');
    // The history without the cancel's results: the reply's calls are unanswered again, and a message runs them.
    const put = await a.req('PUT', `/v1/sessions/${id}/messages`, { messages: await upToCalls(id) });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal((await a.post(`/v1/sessions/${id}/messages`, { content: 'Go on.' })).status, 202);
    const waiting = await a.waitStatus(id, ['requires_action', 'idle', 'failed']);
    assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting));
    // The worker call is offered again, as a task of its own (its first round was cancelled).
    const anew = await claimOne(a, 'stock_check');
    assert.notEqual(anew.id, first.id);
    assert.equal(anew.tool_use_id, 'toolu_worker');
    assert.equal(anew.idempotency_key, `${id}:toolu_worker`);
    assert.equal((await a.post(`/v1/tool-tasks/${anew.id}/result`, { content: 'boots: 2' })).status, 200);
    await a.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_client', content: '42' }],
    });
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(1), [
      { tool_use_id: 'toolu_client', content: '42' },
      { tool_use_id: 'toolu_worker', content: 'boots: 2' },
    ]);
  });

  it('a run that fails after queueing its tasks: resume queues a call whose task was cancelled meanwhile', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which colour?' }, 'toolu_colour'),
        toolUse('stock_check', { item: 'scarf' }, 'toolu_scarf'),
      ]),
      text('A red scarf is in stock.'),
    );
    // The run's write of `requires_action`, after its task was queued, fails once (any error that is not the store
    // being unreachable fails the run, which keeps its step).
    const store = h.service.app.store as any;
    const apply = store.apply.bind(store);
    let failed = false;
    store.apply = async (sid: string, guard: { fence?: number }, ops: { hset?: Record<string, string> }) => {
      if (guard.fence && ops.hset?.['status'] === 'requires_action' && !failed) {
        failed = true;
        throw new Error('injected: the run fails after queueing its tasks');
      }
      return apply(sid, guard, ops);
    };
    let id: string;
    try {
      id = (await a.post('/v1/sessions', { input: 'Scarf?', tools: [askUser, 'stock_check'] })).body.id;
      const s = await a.waitStatus(id, ['requires_action', 'idle', 'failed']);
      assert.equal(s.status, 'failed', JSON.stringify(s));
    } finally {
      store.apply = apply;
    }
    assert.ok(failed);
    // The failed session waits for nothing: the task queued for it is cancelled at its claim.
    assert.deepEqual(await claim(a, 'stock_check', 300), []);

    assert.equal((await a.post(`/v1/sessions/${id}/resume`)).status, 202);
    const waiting = await a.waitStatus(id, ['requires_action', 'idle', 'failed']);
    assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting));
    const task = await claimOne(a, 'stock_check');
    assert.equal(task.tool_use_id, 'toolu_scarf');
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'scarves: 4' })).status, 200);
    await a.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_colour', content: 'red' }],
    });
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(1), [
      { tool_use_id: 'toolu_colour', content: 'red' },
      { tool_use_id: 'toolu_scarf', content: 'scarves: 4' },
    ]);
  });

  it('a step rebuilt after its round’s result was delivered queues the call anew', async () => {
    h.fake.enqueue(
      toolCalls([toolUse('stock_check', { item: 'hats' }, 'toolu_hats')]),
      text('3 hats.'),
      text('Still 3 hats, checked again.'),
    );
    const id = (await a.post('/v1/sessions', { input: 'Hats?', tools: ['stock_check'] })).body.id as string;
    const first = await claimOne(a, 'stock_check');
    assert.equal((await a.post(`/v1/tool-tasks/${first.id}/result`, { content: 'hats: 3' })).status, 200);
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    // Back to the call: its result, delivered, is no longer in the history; a message runs the call again.
    const put = await a.req('PUT', `/v1/sessions/${id}/messages`, { messages: await upToCalls(id) });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal((await a.post(`/v1/sessions/${id}/messages`, { content: 'Check again.' })).status, 202);
    const anew = await claimOne(a, 'stock_check');
    assert.notEqual(anew.id, first.id);
    assert.equal(anew.tool_use_id, 'toolu_hats');
    assert.equal(
      (await a.post(`/v1/tool-tasks/${anew.id}/result`, { content: 'hats: 3 again' })).status,
      200,
    );
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(2), [{ tool_use_id: 'toolu_hats', content: 'hats: 3 again' }]);
  });

  it('a result delivered while the run starts the step’s approved server call is kept, not run again', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('calculate_sum', { a: 40, b: 2 }, 'toolu_sum'),
        toolUse('stock_check', { item: 'gloves' }, 'toolu_gloves'),
      ]),
      text('42, and gloves.'),
    );
    const id = (
      await a.post('/v1/sessions', {
        input: 'Sum and gloves',
        tools: ['calculate_sum', 'stock_check'],
        approval: ['calculate_sum'],
      })
    ).body.id as string;
    assert.equal((await a.waitStatus(id, ['requires_action', 'idle', 'failed'])).status, 'requires_action');
    // The worker's task was queued with the step; its result is delivered once the approval's run has read the
    // step, just before that run writes it with the server call started.
    const task = await claimOne(a, 'stock_check');
    const store = h.service.app.store as any;
    const apply = store.apply.bind(store);
    let delivered = false;
    store.apply = async (
      sid: string,
      guard: { fence?: number },
      ops: { events?: Array<[string, string]> },
    ) => {
      if (guard.fence && !delivered && ops.events?.some(([type]) => type === 'tool.started')) {
        delivered = true;
        const res = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'gloves: 5' });
        assert.equal(res.status, 200, JSON.stringify(res.body));
      }
      return apply(sid, guard, ops);
    };
    try {
      const decided = await a.post(`/v1/sessions/${id}/tool-calls/toolu_sum`, { decision: 'approve' });
      assert.equal(decided.status, 202, JSON.stringify(decided.body));
      const done = await a.waitStatus(id, ['idle', 'failed']);
      assert.equal(done.status, 'idle', JSON.stringify(done));
    } finally {
      store.apply = apply;
    }
    assert.ok(delivered);
    assert.deepEqual(resultsSent(1), [
      { tool_use_id: 'toolu_sum', content: '42' },
      { tool_use_id: 'toolu_gloves', content: 'gloves: 5' },
    ]);
    assert.deepEqual(await claim(a, 'stock_check', 300), [], 'the call is not offered again');
    const completed = ((await a.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as any[]).filter(
      (e) => e.type === 'tool.completed' && e.data.tool_use_id === 'toolu_gloves',
    );
    assert.equal(completed.length, 1, 'announced once');
  });
});
