/**
 * A tool call's result and a cancel of its session, sent at the same moment (spec §7.1): a result answered 200 is in
 * the history, and the cancel keeps it; else the worker is told 409 `task_cancelled` and the call's result is the
 * cancel's. Never a 200 whose result the cancel then replaced with "cancelled before this tool call completed".
 * - Many rounds on two replicas of one Redis (the result on one, the cancel on the other), for a run parked on its
 *   task (`running`, no lease) and for a session waiting for its client with the task out (`requires_action`).
 * - Each interleaving held at a gate (a wrapped method), no timing: the cancel's write held while a worker's result
 *   lands (committed by the route, and by the run's owner); while a client's result lands; and a delivery held
 *   until the cancel has dropped the session's tasks (the worker is answered `task_cancelled`, not 200).
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { askUser, workerTool } from '../fixtures/tool-tasks.js';
import { gate } from '../helpers/promises.js';
import { startHarness, type Api, type ApiResponse, type Harness } from '../helpers/service.js';
import { cancelOwnRun } from '../../src/engine/commit.js';

const CANCELLED = 'Error: cancelled before this tool call completed';

/** The contents of the `tool_result` blocks of `toolUseId` in the session's history. */
async function resultsOf(api: Api, id: string, toolUseId: string): Promise<unknown[]> {
  const r = await api.get(`/v1/sessions/${id}/messages`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return (r.body.data as any[])
    .flatMap((m) => (Array.isArray(m.content) ? m.content : []))
    .filter((b: any) => b.type === 'tool_result' && b.tool_use_id === toolUseId)
    .map((b: any) => b.content);
}

/** The one stock_check task a claim gets (asserted). */
async function claimOne(api: Api): Promise<any> {
  const c = await api.post('/v1/tool-tasks/claim', {
    tools: ['stock_check'],
    wait_ms: 10_000,
    worker_id: 'w',
  });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.equal(c.body.tasks.length, 1, JSON.stringify(c.body));
  return c.body.tasks[0];
}

describe('a tool call result racing a cancel of its session', { timeout: 300_000 }, () => {
  let h1: Harness;
  let h2: Harness;
  let a1: Api;
  let a2: Api;
  before(async () => {
    const env = { API_KEYS: 'acme:key-a', TOOL_TASK_LEASE_MS: '5000' };
    h1 = await startHarness({ env });
    h2 = await startHarness({ env, redis: h1.redis, fakeServer: h1.fake });
    a1 = h1.api;
    a2 = h2.api;
    assert.equal((await a1.req('PUT', '/v1/tools/stock_check', workerTool)).status, 201);
  });
  after(async () => {
    await h2?.close();
    await h1?.close();
  });
  beforeEach(() => h1.fake.reset());

  /** A session whose run parked on its stock_check task (`running`), or that waits for its client too. */
  async function parked(mode: 'running' | 'requires_action'): Promise<{ id: string; task: any }> {
    const calls = [toolUse('stock_check', { item: 'hats' }, 'toolu_w')];
    if (mode === 'requires_action') calls.unshift(toolUse('ask_user', { q: 'Which colour?' }, 'toolu_ask'));
    h1.fake.enqueue(toolCalls(calls), text('Done.'));
    const created = await a1.post('/v1/sessions', {
      input: 'Hats?',
      tools: mode === 'requires_action' ? [askUser, 'stock_check'] : ['stock_check'],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const task = await claimOne(a2);
    if (mode === 'requires_action') await a1.waitStatus(id, 'requires_action');
    return { id, task };
  }

  /**
   * Sends a cancel of session `id` on replica 1 and holds its write (the route's: no fence given) once reached, while
   * `meanwhile` runs; then lets it go on. The cancel's answer. The store's `apply` is restored after.
   */
  async function cancelHeldWhile(id: string, meanwhile: () => Promise<void>): Promise<ApiResponse> {
    const store = h1.service.app.store as any;
    const apply = store.apply;
    const atCancel = gate();
    const letGo = gate();
    let holding = true;
    store.apply = async function (this: unknown, sid: string, guard: any, ops: any, ...rest: unknown[]) {
      if (sid === id && holding && guard?.fence === undefined && ops.hset?.stop_reason === 'cancelled') {
        holding = false;
        atCancel.open();
        await letGo.wait;
      }
      return apply.call(this, sid, guard, ops, ...rest);
    };
    try {
      const cancelling = a1.post(`/v1/sessions/${id}/cancel`);
      await atCancel.wait;
      await meanwhile();
      letGo.open();
      return await cancelling;
    } finally {
      store.apply = apply;
    }
  }

  for (const mode of ['running', 'requires_action'] as const)
    it(`result and cancel at once on two replicas, 30 rounds (${mode})`, async () => {
      const wrong: string[] = [];
      const seen = new Set<string>();
      for (let round = 0; round < 30; round++) {
        h1.fake.reset();
        const { id, task } = await parked(mode);
        const [r, c] = await Promise.all([
          a2.post(`/v1/tool-tasks/${task.id}/result`, { content: 'REAL' }),
          a1.post(`/v1/sessions/${id}/cancel`),
        ]);
        await a1.waitStatus(id, ['idle', 'failed']);
        const got = await resultsOf(a1, id, 'toolu_w');
        const outcome = `result ${r.status} ${r.body?.error?.code ?? ''}, cancel ${c.status}: ${JSON.stringify(got)}`;
        seen.add(r.status === 200 ? 'taken' : 'refused');
        const ok =
          (r.status === 200 && got.length === 1 && got[0] === 'REAL') ||
          (r.status === 409 &&
            r.body?.error?.code === 'task_cancelled' &&
            got.length === 1 &&
            got[0] === CANCELLED);
        if (!ok) wrong.push(`${id}: ${outcome}`);
        assert.ok(c.status === 200 || c.status === 409, outcome);
      }
      assert.deepEqual(wrong, []);
      // Not asserted (either may win every round on a given machine); told for whoever reads the output.
      if (seen.size < 2) console.log(`only ${[...seen].join()} in 30 rounds (${mode})`);
    });

  it("a worker's result lands while the cancel committed by the route is held: the cancel keeps it", async () => {
    const { id, task } = await parked('running');
    const c = await cancelHeldWhile(id, async () => {
      const r = await a2.post(`/v1/tool-tasks/${task.id}/result`, { content: 'REAL' });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    });
    // Worked out again from the session with the result: cancelled, or (its run went on meanwhile) finished.
    assert.ok(c.status === 200 || c.status === 409, JSON.stringify(c.body));
    await a1.waitStatus(id, ['idle', 'failed']);
    assert.deepEqual(await resultsOf(a1, id, 'toolu_w'), ['REAL']);
  });

  it("a client's result lands while the cancel is held: the cancel keeps it", async () => {
    const { id } = await parked('requires_action');
    const c = await cancelHeldWhile(id, async () => {
      const r = await a2.post(`/v1/sessions/${id}/tool-results`, {
        results: [{ tool_use_id: 'toolu_ask', content: 'red' }],
      });
      assert.equal(r.status, 202, JSON.stringify(r.body));
    });
    assert.equal(c.status, 200, JSON.stringify(c.body));
    await a1.waitStatus(id, ['idle', 'failed']);
    assert.deepEqual(await resultsOf(a1, id, 'toolu_ask'), ['red']);
    // The worker's call, still out, was answered by the cancel.
    assert.deepEqual(await resultsOf(a1, id, 'toolu_w'), [CANCELLED]);
  });

  it("a worker's result lands after the run's owner read the session it cancels: the cancel keeps it", async () => {
    // The owner's cancel (its loop's top, `cancelOwnRun`) is made from the session as the run read it; a worker's
    // result needs no lease and lands between that read and the cancel's write. Called here as the run calls it, on
    // a session whose run parked (its fence is the run's).
    const { id, task } = await parked('running');
    const store = h1.service.app.store as any;
    const read = await store.load(id);
    assert.equal(read.status, 'running');
    // The delivery starts no run here: the run cancelling is the one that read the session (its fence stays).
    const { runs } = h2.service.app.store as any;
    const { engine } = h2.service.app as any;
    const wake = runs.wake;
    const kick = engine.kick;
    runs.wake = async (sid: string) => (sid === id ? undefined : wake.call(runs, sid));
    engine.kick = (sid: string) => (sid === id ? undefined : kick.call(engine, sid));
    try {
      const r = await a2.post(`/v1/tool-tasks/${task.id}/result`, { content: 'REAL' });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    } finally {
      runs.wake = wake;
      engine.kick = kick;
    }
    const queue = (h1.service.app as any).toolTasks.queue;
    await cancelOwnRun(
      { store, tasks: queue } as any,
      { id, fence: read.fence, unbilled: null } as any,
      read,
    );
    const s = await a1.get(`/v1/sessions/${id}`);
    assert.equal(s.body.stop_reason, 'cancelled', JSON.stringify(s.body));
    assert.deepEqual(await resultsOf(a1, id, 'toolu_w'), ['REAL']);
    assert.equal((await queue.record('acme', `${id}:toolu_w#0`))?.rec.state, 'delivered');
  });

  it("a worker's result taken as the cancel drops the session's tasks: 409 task_cancelled, not 200", async () => {
    const { id, task } = await parked('running');
    const queue = (h2.service.app as any).toolTasks.queue;
    const record = queue.record;
    const atDelivery = gate();
    const letGo = gate();
    let holding = true;
    // The result is taken (`complete`); its delivery's read of the call is held until the cancel has committed and
    // dropped the session's tasks.
    queue.record = async function (this: unknown, ...args: unknown[]) {
      if (holding && String(args[1]).startsWith(`${id}:`)) {
        holding = false;
        atDelivery.open();
        await letGo.wait;
      }
      return record.apply(this, args);
    };
    try {
      const sending = a2.post(`/v1/tool-tasks/${task.id}/result`, { content: 'REAL' });
      await atDelivery.wait;
      const c = await a1.post(`/v1/sessions/${id}/cancel`);
      assert.equal(c.status, 200, JSON.stringify(c.body));
      assert.equal(c.body.status, 'idle', JSON.stringify(c.body));
      letGo.open();
      const r = await sending;
      assert.equal(r.status, 409, JSON.stringify(r.body));
      assert.equal(r.body.error.code, 'task_cancelled', JSON.stringify(r.body));
    } finally {
      queue.record = record;
    }
    assert.deepEqual(await resultsOf(a1, id, 'toolu_w'), [CANCELLED]);
    assert.equal((await queue.record('acme', `${id}:toolu_w#0`))?.rec.state, 'cancelled');
  });
});
