/**
 * Tenant-tool calls that need no approval are queued in the step their reply's server tools run, even when the
 * same reply also waits for the client (a client tool's result, a decision): the worker (or the HTTP runner) works
 * while the human answers, so the wait is the longer of the two, not their sum (spec §7.1: approval runs before a
 * task is offered, and only then). A result that comes while the session is `requires_action` is kept on the step
 * (`tool.completed`) and starts no run; the client's answer does, which parks again if tasks are still out. Whatever
 * drops the waiting step (cancel, retry, a deadline that fails the session) cancels its tasks (`task_cancelled`).
 * Last, a replica SIGKILLed between queueing the tasks and writing `requires_action`: nothing lost, nothing queued
 * twice.
 *
 * Over 400 lines: the cases are one behaviour (a step's tasks out while its client is asked) seen from each way the
 * step can end, on one harness and its helpers (`mixedSession`, `claimOne`); what happens to a call whose round is
 * over (rebuilt, resumed steps) is test/tools/tool-task-rounds.test.ts, the chat's view test/chat/chat-tool-tasks.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { askUser, workerTool } from '../fixtures/tool-tasks.js';
import { within } from '../helpers/promises.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { startRedisProxy, type RedisProxy } from '../helpers/redis-proxy.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { until } from '../durability/chaos-lib.js';

/** The tool_result blocks of request `i` to the fake: its last (user) turn. */
const resultsSent = (fake: FakeAnthropic, i: number): Array<{ tool_use_id: string; content: unknown }> =>
  (fake.requests[i]!.messages.at(-1)!.content as any[])
    .filter((b: any) => b.type === 'tool_result')
    .map((b: any) => ({ tool_use_id: b.tool_use_id, content: b.content }));

const events = async (api: Api, id: string, type: string): Promise<any[]> =>
  ((await api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as any[]).filter((e) => e.type === type);

/** The one task a claim of `tool` gets within `waitMs` (asserted). */
async function claimOne(api: Api, tool: string, waitMs = 10_000): Promise<any> {
  const c = await api.post('/v1/tool-tasks/claim', { tools: [tool], wait_ms: waitMs, worker_id: 'w-wait' });
  assert.equal(c.status, 200, JSON.stringify(c.body));
  assert.equal(c.body.tasks.length, 1, `one task of ${tool} offered: ${JSON.stringify(c.body)}`);
  return c.body.tasks[0];
}

describe('tool tasks while the session waits for its client', { timeout: 240_000 }, () => {
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

  /** A session whose first reply calls the client tool, then the worker tool; waits for `requires_action`. */
  async function mixedSession(extra: Record<string, unknown> = {}): Promise<string> {
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which size?' }, 'toolu_client'),
        toolUse('stock_check', { item: 'boots' }, 'toolu_worker'),
      ]),
      text('Boots in size 42 are in stock.'),
    );
    const created = await a.post('/v1/sessions', {
      input: 'Do you have boots?',
      tools: [askUser, 'stock_check'],
      ...extra,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const s = await a.waitStatus(created.body.id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    return created.body.id as string;
  }

  it('a worker works while the client answers: its result waits on the step, the client’s answer goes on with both', async () => {
    const id = await mixedSession();
    const task = await claimOne(a, 'stock_check');
    assert.equal(task.session_id, id);
    assert.equal(task.tool_use_id, 'toolu_worker');
    assert.equal(task.idempotency_key, `${id}:toolu_worker`);
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/heartbeat`)).status, 200);
    const res = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'in stock: 3 pairs' });
    assert.equal(res.status, 200, JSON.stringify(res.body));

    // The result is on the step; the session still waits for the client alone, and nothing went to the model.
    const waiting = (await a.get(`/v1/sessions/${id}`)).body;
    assert.equal(waiting.status, 'requires_action');
    assert.deepEqual(waiting.required_action, {
      type: 'submit_tool_results',
      tool_calls: [{ id: 'toolu_client', name: 'ask_user', input: { q: 'Which size?' } }],
      tool_results: [{ tool_use_id: 'toolu_worker', content: 'in stock: 3 pairs', is_error: false }],
    });
    const completed = await events(a, id, 'tool.completed');
    assert.deepEqual(
      completed.map((e) => [e.data.tool_use_id, e.data.content]),
      [['toolu_worker', 'in stock: 3 pairs']],
    );
    assert.equal(h.fake.requests.length, 1, 'no turn is sent while the client has not answered');
    // The status views name only what the client must answer.
    const statuses = await events(a, id, 'session.status');
    const lastStatus = statuses.at(-1)!.data;
    assert.equal(lastStatus.status, 'requires_action');
    assert.deepEqual(
      lastStatus.required_action.tool_calls.map((c: { id: string }) => c.id),
      ['toolu_client'],
    );
    // A result posted twice is refused; the session did not start a run over it.
    const again = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'twice' });
    assert.equal(again.status, 409);
    assert.equal(again.body.error.code, 'task_already_completed');
    assert.equal((await a.get(`/v1/sessions/${id}`)).body.status, 'requires_action');

    const answered = await a.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_client', content: 'size 42' }],
    });
    assert.equal(answered.status, 202, JSON.stringify(answered.body));
    const done = await a.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.equal(h.fake.requests.length, 2);
    // Both results in one user turn, in the order of the calls (not the order they came in).
    assert.deepEqual(resultsSent(h.fake, 1), [
      { tool_use_id: 'toolu_client', content: 'size 42' },
      { tool_use_id: 'toolu_worker', content: 'in stock: 3 pairs' },
    ]);
    const worker = (await events(a, id, 'tool.completed')).filter(
      (e) => e.data.tool_use_id === 'toolu_worker',
    );
    assert.equal(worker.length, 1, 'the worker’s result is announced once');
    assert.equal((await events(a, id, 'tool.started')).length, 1);
  });

  it('the client answers first: the run parks for the task, and goes on with its result', async () => {
    const id = await mixedSession();
    const task = await claimOne(a, 'stock_check');
    const answered = await a.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_client', content: 'size 43' }],
    });
    assert.equal(answered.status, 202, JSON.stringify(answered.body));
    // The run goes on and parks: the session runs, asking its client nothing, while the task is out.
    const parked = await a.waitFor(id, (s) => s.status === 'running' && s.required_action === null);
    assert.equal(parked.status, 'running');
    assert.equal(h.fake.requests.length, 1);
    // The task queued while the session waited is the one the parked run waits for: not queued again.
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/heartbeat`)).status, 200);
    const none = await a.post('/v1/tool-tasks/claim', { tools: ['stock_check'], wait_ms: 300 });
    assert.deepEqual(none.body.tasks, []);
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'none left' })).status, 200);
    const done = await a.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.deepEqual(resultsSent(h.fake, 1), [
      { tool_use_id: 'toolu_client', content: 'size 43' },
      { tool_use_id: 'toolu_worker', content: 'none left' },
    ]);
  });

  it('a result delivered before the run’s requires_action lands is kept: the run’s write leaves its fields be', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which size?' }, 'toolu_client'),
        toolUse('stock_check', { item: 'socks' }, 'toolu_worker'),
      ]),
      text('Socks in stock.'),
    );
    // The run's last write (requires_action) is held until a worker has claimed the queued task and its result was
    // delivered to the session, still `running`.
    const store = h.service.app.store as any;
    const apply = store.apply.bind(store);
    let delivered: Promise<void> | null = null;
    store.apply = async (sid: string, guard: { fence?: number }, ops: { hset?: Record<string, string> }) => {
      if (guard.fence && ops.hset?.['status'] === 'requires_action' && !delivered) {
        delivered = (async () => {
          const task = await claimOne(a, 'stock_check', 2000);
          const res = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'socks: 9' });
          assert.equal(res.status, 200, JSON.stringify(res.body));
        })();
        await delivered;
      }
      return apply(sid, guard, ops);
    };
    let id: string;
    try {
      id = (await a.post('/v1/sessions', { input: 'Socks?', tools: [askUser, 'stock_check'] })).body.id;
      await a.waitStatus(id, ['requires_action', 'idle', 'failed']);
    } finally {
      store.apply = apply;
    }
    assert.ok(delivered, 'the result came before the run ended');
    const waiting = (await a.get(`/v1/sessions/${id}`)).body;
    assert.equal(waiting.status, 'requires_action');
    assert.deepEqual(waiting.required_action.tool_results, [
      { tool_use_id: 'toolu_worker', content: 'socks: 9', is_error: false },
    ]);
    assert.equal((await events(a, id, 'tool.completed')).length, 1);
    await a.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_client', content: 'M' }],
    });
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(h.fake, 1), [
      { tool_use_id: 'toolu_client', content: 'M' },
      { tool_use_id: 'toolu_worker', content: 'socks: 9' },
    ]);
    const worker = (await events(a, id, 'tool.completed')).filter(
      (e) => e.data.tool_use_id === 'toolu_worker',
    );
    assert.equal(worker.length, 1, 'announced once, by its delivery');
  });

  it('cancel while the client is asked: the worker’s heartbeat and result get task_cancelled', async () => {
    const id = await mixedSession();
    const task = await claimOne(a, 'stock_check');
    const cancel = await a.post(`/v1/sessions/${id}/cancel`);
    assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
    assert.equal(cancel.body.status, 'idle');
    const hb = await a.post(`/v1/tool-tasks/${task.id}/heartbeat`);
    assert.equal(hb.status, 409, JSON.stringify(hb.body));
    assert.equal(hb.body.error.code, 'task_cancelled');
    const late = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'too late' });
    assert.equal(late.status, 409);
    assert.equal(late.body.error.code, 'task_cancelled');
    assert.deepEqual(await events(a, id, 'tool.completed'), []);
  });

  it('a task queued, not yet claimed, leaves the queue when the waiting session is cancelled', async () => {
    const id = await mixedSession();
    assert.equal((await a.post(`/v1/sessions/${id}/cancel`)).status, 200);
    const none = await a.post('/v1/tool-tasks/claim', { tools: ['stock_check'], wait_ms: 300 });
    assert.deepEqual(none.body.tasks, [], 'a cancelled session’s call is offered to no worker');
  });

  it('retry while the client is asked: the dropped reply’s task is cancelled', async () => {
    const id = await mixedSession();
    const task = await claimOne(a, 'stock_check');
    h.fake.enqueue(text('Let me start over.'));
    const retry = await a.post(`/v1/sessions/${id}/retry`);
    assert.equal(retry.status, 202, JSON.stringify(retry.body));
    await a.waitStatus(id, 'idle');
    const hb = await a.post(`/v1/tool-tasks/${task.id}/heartbeat`);
    assert.equal(hb.status, 409, JSON.stringify(hb.body));
    assert.equal(hb.body.error.code, 'task_cancelled');
    assert.equal(
      (await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'late' })).body.error.code,
      'task_cancelled',
    );
  });

  it('on_action_timeout fail cancels the task; resume queues the call anew', async () => {
    // Claimed as it is queued (before the run writes requires_action, when the deadline starts), so the claim never
    // races the 1 s deadline, however busy the machine.
    const claiming = claimOne(a, 'stock_check');
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Which size?' }, 'toolu_client'),
        toolUse('stock_check', { item: 'boots' }, 'toolu_worker'),
      ]),
      text('Boots in size 42 are in stock.'),
    );
    const created = await a.post('/v1/sessions', {
      input: 'Do you have boots?',
      tools: [askUser, 'stock_check'],
      action_timeout_s: 1,
      on_action_timeout: 'fail',
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const task = await claiming;
    assert.equal(task.session_id, id);
    const failed = await a.waitStatus(id, ['failed', 'idle'], 20_000);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, 'action_timed_out');
    const hb = await a.post(`/v1/tool-tasks/${task.id}/heartbeat`);
    assert.equal(hb.status, 409, JSON.stringify(hb.body));
    assert.equal(hb.body.error.code, 'task_cancelled');
    // Resumed, the step waits for its client again, and its worker call is a task of its own (a new round).
    await a.req('PATCH', `/v1/sessions/${id}`, { action_timeout_s: null });
    assert.equal((await a.post(`/v1/sessions/${id}/resume`)).status, 202);
    await a.waitStatus(id, 'requires_action');
    const anew = await claimOne(a, 'stock_check');
    assert.notEqual(anew.id, task.id);
    assert.equal(anew.tool_use_id, 'toolu_worker');
    assert.equal((await a.post(`/v1/tool-tasks/${anew.id}/result`, { content: 'found 1' })).status, 200);
    assert.equal(
      (
        await a.post(`/v1/sessions/${id}/tool-results`, {
          results: [{ tool_use_id: 'toolu_client', content: 'any' }],
        })
      ).status,
      202,
    );
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(h.fake, 1), [
      { tool_use_id: 'toolu_client', content: 'any' },
      { tool_use_id: 'toolu_worker', content: 'found 1' },
    ]);
  });

  it('on_action_timeout deny answers the client call; the run parks for the task still out', async () => {
    const id = await mixedSession({ action_timeout_s: 1 });
    const task = await claimOne(a, 'stock_check');
    await until(async () => (await events(a, id, 'action.timed_out')).length > 0, 20_000, 'timed out');
    const parked = await a.waitFor(id, (s) => s.status === 'running' && s.required_action === null);
    assert.equal(parked.status, 'running');
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'two pairs' })).status, 200);
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    const [client, worker] = resultsSent(h.fake, 1);
    assert.match(String(client!.content), /^Error: no result within 1 s/);
    assert.deepEqual(worker, { tool_use_id: 'toolu_worker', content: 'two pairs' });
  });

  it('an approval-required server call beside an auto worker call: the task is offered before the decision', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('calculate_sum', { a: 40, b: 2 }, 'toolu_sum'),
        toolUse('stock_check', { item: 'hats' }, 'toolu_hats'),
      ]),
      text('Done.'),
    );
    const id = (
      await a.post('/v1/sessions', {
        input: 'Sum and hats',
        tools: ['calculate_sum', 'stock_check'],
        approval: ['calculate_sum'],
      })
    ).body.id as string;
    const s = await a.waitStatus(id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.status, 'requires_action');
    assert.equal(s.required_action.type, 'approve_tool_calls');
    assert.deepEqual(
      s.required_action.tool_calls.map((c: { id: string }) => c.id),
      ['toolu_sum'],
    );
    const task = await claimOne(a, 'stock_check');
    assert.equal(task.tool_use_id, 'toolu_hats');
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'no hats' })).status, 200);
    assert.equal((await a.get(`/v1/sessions/${id}`)).body.status, 'requires_action');
    const decided = await a.post(`/v1/sessions/${id}/tool-calls/toolu_sum`, { decision: 'approve' });
    assert.equal(decided.status, 202, JSON.stringify(decided.body));
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(h.fake, 1), [
      { tool_use_id: 'toolu_sum', content: '42' },
      { tool_use_id: 'toolu_hats', content: 'no hats' },
    ]);
  });

  it('a worker call that needs approval is queued only once approved', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('ask_user', { q: 'Sure?' }, 'toolu_ask'),
        toolUse('stock_check', { item: 'gloves' }, 'toolu_gloves'),
      ]),
      text('Done.'),
    );
    const id = (
      await a.post('/v1/sessions', {
        input: 'Gloves?',
        tools: [askUser, 'stock_check'],
        approval: ['stock_check'],
      })
    ).body.id as string;
    const s = await a.waitStatus(id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.required_action.type, 'approve_tool_calls');
    const none = await a.post('/v1/tool-tasks/claim', { tools: ['stock_check'], wait_ms: 500 });
    assert.deepEqual(none.body.tasks, [], 'no task before the decision');
    // Approved: a run goes on (no decision left), queues the call, and waits for the client result again.
    const decided = await a.post(`/v1/sessions/${id}/tool-calls/toolu_gloves`, { decision: 'approve' });
    assert.equal(decided.status, 202, JSON.stringify(decided.body));
    const task = await claimOne(a, 'stock_check');
    assert.equal(task.tool_use_id, 'toolu_gloves');
    const asked = await a.waitFor(id, (x) => x.required_action?.type === 'submit_tool_results');
    assert.deepEqual(
      asked.required_action.tool_calls.map((c: { id: string }) => c.id),
      ['toolu_ask'],
    );
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'gloves: 5' })).status, 200);
    assert.equal(
      (
        await a.post(`/v1/sessions/${id}/tool-results`, {
          results: [{ tool_use_id: 'toolu_ask', content: 'yes' }],
        })
      ).status,
      202,
    );
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(h.fake, 1), [
      { tool_use_id: 'toolu_ask', content: 'yes' },
      { tool_use_id: 'toolu_gloves', content: 'gloves: 5' },
    ]);
  });
});

describe('an http tool while the session waits for its client', { timeout: 120_000 }, () => {
  let h: Harness;
  let server: http.Server;
  const calls: any[] = [];
  let onCall = () => {};
  before(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        calls.push(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ content: 'priced at 12 EUR' }));
        onCall();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', WEBHOOK_ALLOW_PRIVATE: 'true' } });
  });
  after(async () => {
    await h?.close();
    await new Promise<void>((r) => server.close(() => r()));
  });

  it('the service calls the URL while the session is requires_action; the result waits for the client', async () => {
    const a = h.api;
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/price`;
    const put = await a.req('PUT', '/v1/tools/price_check', {
      description: 'Price an item.',
      input_schema: { type: 'object', properties: { item: { type: 'string' } } },
      runner: { type: 'http', url },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    h.fake.enqueue(
      toolCalls([
        toolUse('price_check', { item: 'scarf' }, 'toolu_price'),
        toolUse('ask_user', { q: 'Colour?' }, 'toolu_colour'),
      ]),
      text('A red scarf is 12 EUR.'),
    );
    const called = new Promise<void>((r) => (onCall = r));
    const id = (await a.post('/v1/sessions', { input: 'Scarf?', tools: [askUser, 'price_check'] })).body
      .id as string;
    await within(called, 20_000, 'the URL called');
    const s = await a.waitFor(id, (x) => x.required_action?.tool_results?.length === 1, 20_000);
    assert.equal(s.status, 'requires_action');
    assert.deepEqual(s.required_action.tool_calls, [
      { id: 'toolu_colour', name: 'ask_user', input: { q: 'Colour?' } },
    ]);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].tool_use_id, 'toolu_price');
    assert.equal(
      (
        await a.post(`/v1/sessions/${id}/tool-results`, {
          results: [{ tool_use_id: 'toolu_colour', content: 'red' }],
        })
      ).status,
      202,
    );
    assert.equal((await a.waitStatus(id, ['idle', 'failed'])).status, 'idle');
    assert.deepEqual(resultsSent(h.fake, 1), [
      { tool_use_id: 'toolu_price', content: 'priced at 12 EUR' },
      { tool_use_id: 'toolu_colour', content: 'red' },
    ]);
    assert.equal(calls.length, 1, 'called once');
  });
});

/** What only the queueing of a tool task carries (tasks.ts `enqueue`: the record's `queued_at`). */
const ENQUEUE = '"queued_at":';

describe(
  'a replica SIGKILLed between queueing the tasks and writing requires_action',
  { timeout: 300_000 },
  () => {
    let redis: TestRedis;
    let fake: FakeAnthropic;
    let proxy: RedisProxy | null = null;
    let survivor: ServiceProcess | null = null;
    let r: Redis;
    before(async () => {
      [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
      r = new Redis(redis.url);
    });
    after(async () => {
      await survivor?.kill();
      await proxy?.close();
      r?.disconnect();
      await fake?.close();
      await redis?.stop();
    });

    it('loses nothing and queues nothing twice', async () => {
      const env = (url: string) => serviceEnv(url, fake.url, { API_KEYS: 'acme:key-a' });
      proxy = await startRedisProxy(redis.port);
      const doomed = await spawnService(env(proxy.url), { name: 'doomed' });
      const d = doomed.api.as('key-a');
      assert.equal((await d.req('PUT', '/v1/tools/stock_check', workerTool)).status, 201);
      fake.enqueue(
        toolCalls([
          toolUse('ask_user', { q: 'Which size?' }, 'toolu_client'),
          toolUse('stock_check', { item: 'boots' }, 'toolu_worker'),
        ]),
        text('In stock.'),
      );
      const held = proxy.holdAfter(ENQUEUE);
      const id = (await d.post('/v1/sessions', { input: 'Boots?', tools: [askUser, 'stock_check'] })).body
        .id as string;
      // The task is queued (its script went through); nothing after it reaches Redis: the run's requires_action never
      // lands.
      await within(held, 30_000, 'the task queued');
      await doomed.kill();
      await proxy.close();
      proxy = null;
      assert.equal(await r.hget(`s:{${id}}`, 'status'), 'running');
      const queued = async () => (await r.hkeys('tt:{tt:acme}:calls')).filter((k) => k.startsWith(`${id}:`));
      assert.deepEqual(await queued(), [`${id}:toolu_worker#0`]);

      // Another replica takes the run over once its lease lapsed, and ends it where the dead one would have.
      survivor = await spawnService(env(redis.url), { name: 'survivor' });
      const s = survivor.api.as('key-a');
      const waiting = await s.waitStatus(id, ['requires_action', 'idle', 'failed'], 60_000);
      assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting));
      assert.deepEqual(
        waiting.required_action.tool_calls.map((c: { id: string }) => c.id),
        ['toolu_client'],
      );
      assert.deepEqual(await queued(), [`${id}:toolu_worker#0`], 'queued once');
      const task = await claimOne(s, 'stock_check');
      assert.equal(task.attempt, 1);
      const more = await s.post('/v1/tool-tasks/claim', { tools: ['stock_check'], wait_ms: 500 });
      assert.deepEqual(more.body.tasks, [], 'offered once');
      assert.equal((await s.post(`/v1/tool-tasks/${task.id}/result`, { content: 'yes' })).status, 200);
      assert.equal(
        (
          await s.post(`/v1/sessions/${id}/tool-results`, {
            results: [{ tool_use_id: 'toolu_client', content: '42' }],
          })
        ).status,
        202,
      );
      assert.equal((await s.waitStatus(id, ['idle', 'failed'], 30_000)).status, 'idle');
      assert.deepEqual(resultsSent(fake, 1), [
        { tool_use_id: 'toolu_client', content: '42' },
        { tool_use_id: 'toolu_worker', content: 'yes' },
      ]);
      assert.equal((await events(s, id, 'tool.started')).length, 1);
    });
  },
);
