import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';
import { Redis } from 'ioredis';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { sessionKeys } from '../../src/store/keys.js';
import { startMcpServer, type TestMcpServer } from '../helpers/mcp-server.js';

const lookup = {
  description: 'Look an order up in the tenant’s database.',
  input_schema: { type: 'object', properties: { id: { type: 'number' } }, required: ['id'] },
  runner: { type: 'worker' },
};

/** The tool_result blocks the fake got in request `i`. */
const resultsSent = (h: Harness, i: number): any[] =>
  (h.fake.requests[i]!.messages.at(-1)!.content as any[]).filter((b: any) => b.type === 'tool_result');

const events = async (api: Api, id: string, type: string): Promise<any[]> => {
  const r = await api.get(`/v1/sessions/${id}/events?limit=500`);
  return (r.body.data as any[]).filter((e) => e.type === type);
};

describe('tenant tools and tool tasks', () => {
  let h: Harness;
  let a: Api;
  let b: Api;
  before(async () => {
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-a,globex:key-b,initech:key-c',
        TOOL_TASK_LEASE_MS: '1000',
        TOOL_RESULT_MAX_BYTES: '200000',
        // Under the 300 kB result below: the result route takes bodies of twice TOOL_RESULT_MAX_BYTES all the same.
        BODY_LIMIT: '150000',
      },
    });
    a = h.api;
    b = h.api.as('key-b');
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  /** Resolves once a claim waits on acme's wake channel (subscribed to it: a call queued now wakes it). */
  async function claimListening(): Promise<void> {
    const r = new Redis(h.redis.url);
    try {
      await until(
        async () => Number((await r.pubsub('NUMSUB', 'tt:{tt:acme}:wake'))[1]) > 0,
        10_000,
        'the claim listening',
      );
    } finally {
      r.disconnect();
    }
  }

  it('PUT registers (201, then 200), refuses a server tool name, and is the tenant’s alone', async () => {
    const created = await a.req('PUT', '/v1/tools/lookup_order', lookup);
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual(created.body.runner, { type: 'worker' });
    assert.equal(created.body.timeout_ms, 600000);
    assert.equal(created.body.max_attempts, 3);
    assert.equal(created.body.secret, undefined);
    assert.equal(created.body.revision, 1);
    assert.equal(created.headers.get('etag'), '"1"');
    // If-Match (contract §7: the rules of §3): a stale revision is 412 and changes nothing.
    const stale = await a.req('PUT', '/v1/tools/lookup_order', lookup, { 'if-match': '"7"' });
    assert.equal(stale.status, 412);
    assert.equal(stale.body.error.code, 'revision_mismatch');
    assert.equal(stale.body.error.details.revision, 1);
    const replaced = await a.req('PUT', '/v1/tools/lookup_order', lookup, { 'if-match': '"1"' });
    assert.equal(replaced.status, 200);
    assert.equal(replaced.body.revision, 2);
    assert.equal((await a.get('/v1/tools/lookup_order')).headers.get('etag'), '"2"');
    const staleDelete = await a.req('DELETE', '/v1/tools/lookup_order', undefined, { 'if-match': '"1"' });
    assert.equal(staleDelete.status, 412);
    assert.equal(staleDelete.body.error.code, 'revision_mismatch');
    const clash = await a.req('PUT', '/v1/tools/calculate_sum', lookup);
    assert.equal(clash.status, 409);
    assert.equal(clash.body.error.code, 'tool_name_conflict');
    const removeServerTool = await a.req('DELETE', '/v1/tools/calculate_sum');
    assert.equal(removeServerTool.status, 409, 'a server tool is not removed, as it is not replaced');
    assert.equal(removeServerTool.body.error.code, 'tool_name_conflict');
    const bad = await a.req('PUT', '/v1/tools/bad%20name', lookup);
    assert.equal(bad.status, 400);
    // A name longer than any route parameter the router used to take is refused by the route, not unrouted.
    const bodies = { '/v1/tools/': lookup, '/v1/mcp-servers/': { url: 'http://127.0.0.1:9/mcp' } };
    for (const [path, body] of Object.entries(bodies)) {
      const long = await a.req('PUT', path + 'a'.repeat(3000), body);
      assert.equal(long.status, 400, `${path}: ${JSON.stringify(long.body).slice(0, 200)}`);
      assert.equal(long.body.error.code, 'invalid_request');
    }
    const badBody = await a.req('PUT', '/v1/tools/x', { ...lookup, max_attempts: 11 });
    assert.equal(badBody.status, 400);

    const list = await a.get('/v1/tools');
    const mine = list.body.data.find((t: any) => t.name === 'lookup_order');
    assert.equal(mine.source, 'tenant');
    assert.deepEqual(mine.workers, { active: 0, last_seen_at: null });
    assert.ok(list.body.data.some((t: any) => t.source === 'server'));
    assert.equal((await a.get('/v1/tools/lookup_order')).status, 200);

    // Another tenant sees none of it.
    assert.equal((await b.get('/v1/tools/lookup_order')).status, 404);
    assert.equal((await b.get('/v1/tools/lookup_order')).body.error.code, 'tool_not_found');
    assert.ok(!(await b.get('/v1/tools')).body.data.some((t: any) => t.name === 'lookup_order'));
    assert.equal((await b.req('DELETE', '/v1/tools/lookup_order')).status, 404);
    const s = await b.post('/v1/sessions', { input: 'hi', tools: ['lookup_order'] });
    assert.equal(s.status, 400);
    assert.equal(s.body.error.code, 'unknown_tool');
  });

  it('a worker claims the call (long-poll woken by the queue), heartbeats, answers; the session goes on', async () => {
    await a.req('PUT', '/v1/tools/lookup_order', lookup);
    h.fake.enqueue(toolCalls([toolUse('lookup_order', { id: 7 }, 'toolu_w1')]), text('Order 7 shipped.'));
    // The claim waits before there is anything to claim.
    const claim = a.post('/v1/tool-tasks/claim', {
      tools: ['lookup_order'],
      wait_ms: 20000,
      worker_id: 'w-1',
    });
    const other = b.post('/v1/tool-tasks/claim', { tools: ['lookup_order'], wait_ms: 1500 });
    const created = await a.post('/v1/sessions', { input: 'Where is order 7?', tools: ['lookup_order'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const c = await claim;
    assert.equal(c.status, 200, JSON.stringify(c.body));
    assert.equal(c.body.tasks.length, 1);
    const task = c.body.tasks[0];
    assert.match(task.id, /^tt_/);
    assert.equal(task.session_id, id);
    assert.equal(task.tool_use_id, 'toolu_w1');
    assert.deepEqual(task.input, { id: 7 });
    assert.equal(task.attempt, 1);
    assert.equal(task.idempotency_key, `${id}:toolu_w1`);
    // The session waits for the worker without asking its client anything.
    const during = (await a.get(`/v1/sessions/${id}`)).body;
    assert.equal(during.status, 'running');
    assert.equal(during.required_action, null);
    const hb = await a.post(`/v1/tool-tasks/${task.id}/heartbeat`);
    assert.equal(hb.status, 200, JSON.stringify(hb.body));
    // A heartbeat takes no body (or `{}`): anything else is 400, as on every body-less POST.
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/heartbeat`, {})).status, 200);
    for (const body of [{ zz_unknown: 1 }, [], 'x', 1]) {
      const refused = await a.post(`/v1/tool-tasks/${task.id}/heartbeat`, body);
      assert.equal(refused.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(refused.body)}`);
    }
    assert.ok(Date.parse(hb.body.lease_expires_at) > Date.now());
    // Tenant B's worker never sees it.
    assert.equal((await b.post(`/v1/tool-tasks/${task.id}/heartbeat`)).status, 404);
    assert.equal((await b.post(`/v1/tool-tasks/${task.id}/result`, { content: 'x' })).status, 404);
    // Heartbeats keep the lease while tenant B's claim waits out its time.
    const beat = setInterval(() => void a.post(`/v1/tool-tasks/${task.id}/heartbeat`), 300);
    assert.deepEqual((await other).body.tasks, []);
    clearInterval(beat);
    const listed = (await a.get('/v1/tools/lookup_order')).body;
    assert.equal(listed.workers.active, 1);
    const res = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'shipped on Monday' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const again = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'twice' });
    assert.equal(again.status, 409);
    assert.equal(again.body.error.code, 'task_already_completed');

    const done = await a.waitStatus(id, 'idle');
    assert.equal(done.stop_reason, 'end_turn');
    assert.deepEqual(resultsSent(h, 1), [
      { type: 'tool_result', tool_use_id: 'toolu_w1', content: 'shipped on Monday' },
    ]);
    const started = await events(a, id, 'tool.started');
    assert.equal(started.length, 1, JSON.stringify(started));
    assert.equal(started[0].data.attempt, 1);
    assert.equal(started[0].data.worker_id, 'w-1');
    assert.deepEqual(started[0].data.input, task.input, 'tool.started carries the input (spec §4)');
    const completed = await events(a, id, 'tool.completed');
    assert.equal(completed.length, 1, JSON.stringify(completed));
    assert.equal(completed[0].data.content, 'shipped on Monday');
  });

  it('a waiting claim woken by a reply of several calls takes up to its `max` of them, not the first alone', async () => {
    await a.req('PUT', '/v1/tools/lookup_order', lookup);
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup_order', { id: 1 }, 'toolu_m1'),
        toolUse('lookup_order', { id: 2 }, 'toolu_m2'),
        toolUse('lookup_order', { id: 3 }, 'toolu_m3'),
      ]),
      text('All three found.'),
    );
    const claim = a.post('/v1/tool-tasks/claim', {
      tools: ['lookup_order'],
      max: 5,
      wait_ms: 20000,
      worker_id: 'w-many',
    });
    // The claim found nothing and waits on the tenant's wake channel before the reply's calls are queued.
    await claimListening();
    const id = (await a.post('/v1/sessions', { input: 'Orders 1 to 3?', tools: ['lookup_order'] })).body.id;
    const c = await claim;
    assert.equal(c.status, 200, JSON.stringify(c.body));
    assert.deepEqual(c.body.tasks.map((t: { tool_use_id: string }) => t.tool_use_id).sort(), [
      'toolu_m1',
      'toolu_m2',
      'toolu_m3',
    ]);
    for (const t of c.body.tasks)
      assert.equal(
        (await a.post(`/v1/tool-tasks/${t.id}/result`, { content: `order ${t.input.id}` })).status,
        200,
      );
    assert.equal((await a.waitStatus(id, 'idle')).stop_reason, 'end_turn');
    assert.deepEqual(
      resultsSent(h, 1).map((b) => b.content),
      ['order 1', 'order 2', 'order 3'],
    );
  });

  it('a claim waiting as its service closes is answered {"tasks": []} at once, not cut; no task is lost', async () => {
    // The server destroys its connections once its preClose hooks are done (forceCloseConnections): a claim still
    // waiting then was cut with a socket error, where the WebSockets get a clean 1001.
    const other = await startHarness({
      redis: h.redis,
      fakeServer: h.fake,
      env: { API_KEYS: 'acme:key-a', TOOL_TASK_LEASE_MS: '1000' },
    });
    let closed = false;
    try {
      await a.req('PUT', '/v1/tools/lookup_order', lookup);
      const began = Date.now();
      const claim = other.api.post('/v1/tool-tasks/claim', {
        tools: ['lookup_order'],
        wait_ms: 30000,
        worker_id: 'w-closing',
      });
      await claimListening();
      closed = true;
      const closing = other.service.close();
      const c = await claim;
      assert.equal(c.status, 200, JSON.stringify(c.body));
      assert.deepEqual(c.body, { tasks: [] });
      assert.ok(Date.now() - began < 15_000, 'answered as the service closes, not after wait_ms');
      await closing;
    } finally {
      if (!closed) await other.service.close();
    }
    // The call queued next goes to a claim of the replica still up.
    h.fake.enqueue(toolCalls([toolUse('lookup_order', { id: 9 }, 'toolu_c1')]), text('Order 9 shipped.'));
    const id = (await a.post('/v1/sessions', { input: 'Order 9?', tools: ['lookup_order'] })).body.id;
    const next = await a.post('/v1/tool-tasks/claim', { tools: ['lookup_order'], wait_ms: 10000 });
    assert.equal(next.body.tasks.length, 1, JSON.stringify(next.body));
    assert.equal(next.body.tasks[0].tool_use_id, 'toolu_c1');
    await a.post(`/v1/tool-tasks/${next.body.tasks[0].id}/result`, { content: 'shipped' });
    assert.equal((await a.waitStatus(id, 'idle')).stop_reason, 'end_turn');
  });

  it('a claim answers once its tasks’ tool.started are logged: the worker’s result never comes before it', async () => {
    await a.req('PUT', '/v1/tools/lookup_order', lookup);
    h.fake.enqueue(toolCalls([toolUse('lookup_order', { id: 8 }, 'toolu_o1')]), text('Done.'));
    const created = await a.post('/v1/sessions', { input: 'Order 8?', tools: ['lookup_order'] });
    const id = created.body.id as string;
    await a.waitFor(id, (s) => s.status === 'running');
    const store = h.service.app.store;
    const append = store.appendEvents.bind(store);
    let answered = false;
    let answeredFirst = false;
    let onAnswer = () => {};
    const answer = new Promise<void>((resolve) => (onAnswer = resolve));
    let onWritten = () => {};
    const written = new Promise<void>((resolve) => (onWritten = resolve));
    // tool.started's write is held until the claim has answered, or for 500 ms (the claim waits for that write now:
    // only a claim that answers before it would end the hold early).
    store.appendEvents = async (...args: Parameters<typeof store.appendEvents>) => {
      if (args[0] === id && args[1].some(([type]) => type === 'tool.started')) {
        await Promise.race([answer, new Promise((resolve) => setTimeout(resolve, 500))]);
        answeredFirst = answered;
        await append(...args);
        return onWritten();
      }
      return append(...args);
    };
    try {
      const c = await a.post('/v1/tool-tasks/claim', {
        tools: ['lookup_order'],
        wait_ms: 10_000,
        worker_id: 'w-o',
      });
      answered = true;
      onAnswer();
      await written;
      assert.equal(c.body.tasks.length, 1, JSON.stringify(c.body));
      assert.equal(answeredFirst, false, 'the claim answered before its tool.started was written');
      await a.post(`/v1/tool-tasks/${c.body.tasks[0].id}/result`, { content: 'shipped' });
      await a.waitStatus(id, 'idle');
      const types = (
        (await a.get(`/v1/sessions/${id}/events?limit=500`)).body.data as Array<{ type: string }>
      ).map((e) => e.type);
      assert.ok(types.indexOf('tool.started') < types.indexOf('tool.completed'), types.join(' '));
    } finally {
      store.appendEvents = append;
    }
  });

  it('two parallel calls answered at once: each is announced once (a result delivered while the run parks)', async () => {
    await a.req('PUT', '/v1/tools/pair_tool', lookup);
    h.fake.enqueue(
      toolCalls([toolUse('pair_tool', { id: 1 }, 'toolu_pa'), toolUse('pair_tool', { id: 2 }, 'toolu_pb')]),
      text('both done'),
    );
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['pair_tool'] })).body.id;
    // Both tasks are out (queued after the first run's park), claimed by one worker.
    const tasks: any[] = [];
    while (tasks.length < 2) {
      const c = await a.post('/v1/tool-tasks/claim', { tools: ['pair_tool'], max: 2, wait_ms: 10000 });
      tasks.push(...c.body.tasks);
    }
    const [ta, tb] = ['toolu_pa', 'toolu_pb'].map((u) => tasks.find((t) => t.tool_use_id === u));
    // Result A starts a run, which reads the step (B outstanding) and parks again. B's result is delivered between
    // that run's read and its park's write of the step: the order in which the write could lose what B's delivery
    // wrote (B announced).
    const store = h.service.app.store as any;
    const apply = store.apply.bind(store);
    let bDelivered: Promise<{ status: number }> | null = null;
    store.apply = async (sid: string, guard: { fence?: string }, ops: { hset?: Record<string, string> }) => {
      if (sid === id && guard.fence && ops.hset?.['pending'] && !bDelivered) {
        bDelivered = a.post(`/v1/tool-tasks/${tb.id}/result`, { content: 'B' });
        assert.equal((await bDelivered).status, 200);
      }
      return apply(sid, guard, ops);
    };
    try {
      assert.equal((await a.post(`/v1/tool-tasks/${ta.id}/result`, { content: 'A' })).status, 200);
      await a.waitStatus(id, 'idle');
    } finally {
      store.apply = apply;
    }
    assert.ok(bDelivered, 'the run parked again after A');
    const completed = await events(a, id, 'tool.completed');
    assert.deepEqual(completed.map((e) => e.data.tool_use_id).sort(), ['toolu_pa', 'toolu_pb']);
    // Both announced by their delivery (with its attempt), none again by the run's commit.
    assert.deepEqual(
      completed.map((e) => e.data.attempt),
      [1, 1],
    );
    assert.deepEqual(
      resultsSent(h, 1).map((r) => r.content),
      ['A', 'B'],
    );
    // The flags went with the step.
    const probe = new Redis(h.redis.url);
    try {
      assert.deepEqual(
        (await probe.hkeys(`s:{${id}}`)).filter((f) => /^(result|reported):/.test(f)),
        [],
      );
    } finally {
      probe.disconnect();
    }
  });

  it('results of many calls of one session posted at once: each answered 200 and delivered once, without the sweep', async () => {
    // Each result's delivery is a guarded write of the session: posted together, they race for one revision, and
    // the write retried (mutate's CAS_ATTEMPTS) was refused 412 revision_mismatch past its retries, though the
    // result was taken (a resend got 409 task_already_completed) and §7.1 declares no 412 for this route. The
    // contention is made deterministic: every delivery write of the session is held until each result still in
    // flight has reached its write, then all are let go at once (one wins per round). With the sweep held off,
    // the session can only finish if the results' own deliveries brought every result and kicked the run.
    const n = 12;
    await a.req('PUT', '/v1/tools/fan_tool', lookup);
    h.fake.enqueue(
      toolCalls(Array.from({ length: n }, (_, i) => toolUse('fan_tool', { id: i }, `toolu_fan${i}`))),
      text('all done'),
    );
    const tasks = h.service.app.toolTasks;
    const sweep = tasks.sweep;
    tasks.sweep = async () => {};
    const store = h.service.app.store as any;
    const apply = store.apply.bind(store);
    try {
      const id = (await a.post('/v1/sessions', { input: 'go', tools: ['fan_tool'] })).body.id;
      const claimed: any[] = [];
      while (claimed.length < n) {
        const c = await a.post('/v1/tool-tasks/claim', { tools: ['fan_tool'], max: n, wait_ms: 10000 });
        claimed.push(...c.body.tasks);
      }
      const held: Array<() => void> = [];
      let answered = 0;
      let rounds = 0;
      const release = () => {
        if (held.length === 0 || held.length < n - answered) return;
        rounds++;
        for (const go of held.splice(0)) go();
      };
      store.apply = async (
        sid: string,
        guard: { fence?: string },
        ops: { events?: string[][] },
        ...rest: unknown[]
      ) => {
        if (sid === id && !guard.fence && ops.events?.some(([type]) => type === 'tool.completed')) {
          await new Promise<void>((go) => {
            held.push(go);
            release();
          });
        }
        return apply(sid, guard, ops, ...rest);
      };
      const answers = await Promise.all(
        claimed.map((t) =>
          a.post(`/v1/tool-tasks/${t.id}/result`, { content: `r-${t.tool_use_id}` }).then((r) => {
            answered++;
            release();
            return r;
          }),
        ),
      );
      assert.deepEqual(
        answers.map((r) => r.status),
        answers.map(() => 200),
        JSON.stringify(answers.filter((r) => r.status !== 200).map((r) => r.body)),
      );
      assert.ok(rounds >= 1, 'the deliveries met at their writes');
      await a.waitStatus(id, 'idle', 30000);
      const completed = await events(a, id, 'tool.completed');
      assert.deepEqual(
        completed.map((e) => e.data.tool_use_id).sort(),
        claimed.map((t) => t.tool_use_id).sort(),
      );
      const sent = resultsSent(h, 1);
      assert.deepEqual(
        sent.map((r) => `${r.tool_use_id}=${r.content}`).sort(),
        claimed.map((t) => `${t.tool_use_id}=r-${t.tool_use_id}`).sort(),
      );
      assert.equal(h.fake.requests.length, 2);
      // Taken once: a resend is told so.
      const again = await a.post(`/v1/tool-tasks/${claimed[0].id}/result`, { content: 'again' });
      assert.equal(again.status, 409);
      assert.equal(again.body.error.code, 'task_already_completed');
    } finally {
      store.apply = apply;
      tasks.sweep = sweep;
    }
  });

  it('the session keeps its copy: a tool deleted after create still runs for it', async () => {
    await a.req('PUT', '/v1/tools/copy_tool', lookup);
    h.fake.enqueue(toolCalls([toolUse('copy_tool', { id: 1 }, 'toolu_c1')]), text('ok'));
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['copy_tool'] })).body.id;
    assert.equal((await a.req('DELETE', '/v1/tools/copy_tool')).status, 200);
    assert.equal((await a.get('/v1/tools/copy_tool')).status, 404);
    const c = await a.post('/v1/tool-tasks/claim', { tools: ['copy_tool'], wait_ms: 10000 });
    assert.equal(c.body.tasks.length, 1);
    assert.equal(
      (await a.post(`/v1/tool-tasks/${c.body.tasks[0].id}/result`, { content: 'one' })).status,
      200,
    );
    await a.waitStatus(id, 'idle');
    assert.deepEqual(
      (h.fake.requests[0]!.tools as any[]).find((t: any) => t.name === 'copy_tool')?.input_schema,
      lookup.input_schema,
    );
  });

  it('a lost lease offers the call again (attempt 2, same idempotency key); the old id is refused', async () => {
    await a.req('PUT', '/v1/tools/flaky', lookup);
    h.fake.enqueue(toolCalls([toolUse('flaky', { id: 2 }, 'toolu_f1')]), text('ok'));
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['flaky'] })).body.id;
    const first = (
      await a.post('/v1/tool-tasks/claim', { tools: ['flaky'], wait_ms: 10000, worker_id: 'dies' })
    ).body.tasks[0];
    // No heartbeat: the lease (1 s) lapses and the sweep offers the call again, waking this claim.
    const second = (
      await a.post('/v1/tool-tasks/claim', { tools: ['flaky'], wait_ms: 20000, worker_id: 'lives' })
    ).body.tasks[0];
    assert.ok(second, 'offered again');
    assert.notEqual(second.id, first.id);
    assert.equal(second.attempt, 2);
    assert.equal(second.idempotency_key, first.idempotency_key);
    const late = await a.post(`/v1/tool-tasks/${first.id}/result`, { content: 'late' });
    assert.equal(late.status, 409);
    assert.equal(late.body.error.code, 'task_lease_lost');
    assert.equal((await a.post(`/v1/tool-tasks/${first.id}/heartbeat`)).body.error.code, 'task_lease_lost');
    assert.equal((await a.post(`/v1/tool-tasks/${second.id}/result`, { content: 'fine' })).status, 200);
    await a.waitStatus(id, 'idle');
    assert.equal(resultsSent(h, 1)[0].content, 'fine');
    // Once the call is settled nothing is offered again: the lost attempt is told it has its result.
    const settled = await a.post(`/v1/tool-tasks/${first.id}/heartbeat`);
    assert.equal(settled.status, 409);
    assert.equal(settled.body.error.code, 'task_already_completed');
    assert.equal(settled.body.error.details.reason, 'result_taken');
    const retried = await events(a, id, 'tool_task.retried');
    assert.equal(retried.length, 1);
    assert.equal(retried[0].data.attempt, 1);
  });

  it('a heartbeat past the lease’s expiry, before the sweep offered the call again, renews it as a result is taken', async () => {
    // A heartbeat in that window was refused 409 task_lease_lost while a result sent at the same moment was taken:
    // the typed client's ToolWorker aborts its tool on that 409, so a call whose result would have been taken was
    // run again. initech: a tenant of its own, whose sweeps nothing else makes due.
    const c = h.api.as('key-c');
    const r = new Redis(h.redis.url);
    try {
      await c.req('PUT', '/v1/tools/late_beat', lookup);
      h.fake.enqueue(toolCalls([toolUse('late_beat', { id: 9 }, 'toolu_lb')]), text('ok'));
      const id = (await c.post('/v1/sessions', { input: 'go', tools: ['late_beat'] })).body.id;
      const task = (await c.post('/v1/tool-tasks/claim', { tools: ['late_beat'], wait_ms: 10000 })).body
        .tasks[0];
      assert.ok(task);
      // The tenant's sweep held off (its due time an hour away), so the lapsed lease stays the call's offer.
      await r.zadd('tt:due', Date.now() + 3_600_000, 'initech');
      const expiry = Date.parse(task.lease_expires_at);
      await until(async () => Date.now() > expiry + 200, 10_000, 'the lease lapsed');
      const hb = await c.post(`/v1/tool-tasks/${task.id}/heartbeat`);
      assert.equal(hb.status, 200, JSON.stringify(hb.body));
      assert.ok(Date.parse(hb.body.lease_expires_at) > expiry + 200, 'a new expiry');
      // The sweep comes (the tenant due now) and finds the renewed lease: the call is not offered again. The worker
      // heartbeats meanwhile, as a worker does.
      const beat = setInterval(() => void c.post(`/v1/tool-tasks/${task.id}/heartbeat`), 250);
      try {
        const due = Date.now();
        await r.zadd('tt:due', due, 'initech');
        await until(async () => Number(await r.zscore('tt:due', 'initech')) !== due, 10_000, 'a sweep');
      } finally {
        clearInterval(beat);
      }
      assert.deepEqual((await c.post('/v1/tool-tasks/claim', { tools: ['late_beat'] })).body.tasks, []);
      const res = await c.post(`/v1/tool-tasks/${task.id}/result`, { content: 'kept' });
      assert.equal(res.status, 200, JSON.stringify(res.body));
      await c.waitStatus(id, 'idle');
      assert.equal(resultsSent(h, 1)[0].content, 'kept');
      assert.equal((await events(c, id, 'tool_task.retried')).length, 0);
    } finally {
      r.disconnect();
    }
  });

  it('an interrupt while the run is parked on a task aborts no later turn: the turn after the result runs once, with the message', async () => {
    // The message's `control: interrupt` is written while no run is there to hear its publish: checked here that the
    // flag, left until the run ends, does not abort the turn the task's result leads to (only a live run's control
    // channel aborts a turn; the flag is read for `cancel` alone).
    await a.req('PUT', '/v1/tools/parked', lookup);
    h.fake.enqueue(
      toolCalls([toolUse('parked', { id: 11 }, 'toolu_pk')]),
      text('the answer after the result, streamed slowly', { eventDelayMs: 40 }),
    );
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['parked'] })).body.id;
    const r = new Redis(h.redis.url);
    try {
      const k = sessionKeys(id);
      await until(
        async () =>
          (await r.hexists('tt:{tt:acme}:calls', `${id}:toolu_pk#0`)) === 1 &&
          (await r.exists(k.lease)) === 0,
        10_000,
        'the run parked on its task',
      );
      const posted = await a.post(`/v1/sessions/${id}/messages`, { text: 'and also this', interrupt: true });
      assert.equal(posted.status, 202, JSON.stringify(posted.body));
      assert.equal(await r.hget(k.meta, 'control'), 'interrupt', 'the flag is written, heard by no run');
      const task = (await a.post('/v1/tool-tasks/claim', { tools: ['parked'], wait_ms: 10000 })).body
        .tasks[0];
      assert.ok(task);
      assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'found' })).status, 200);
      const s = await a.waitStatus(id, 'idle', 20_000);
      assert.equal(s.stop_reason, 'end_turn');
      assert.equal(
        h.fake.requests.length,
        2,
        'the turn after the result was sent once, not aborted and sent again',
      );
      const sent = h.fake.requests[1]!.messages.at(-1)!.content as any[];
      assert.deepEqual(
        sent.map((b: any) => b.type),
        ['tool_result', 'text'],
      );
      assert.equal(sent[0].content, 'found');
      assert.equal(sent[1].text, 'and also this');
      assert.equal((await events(a, id, 'turn.dropped')).length, 0);
      const history = (await a.get(`/v1/sessions/${id}/messages`)).body.data as any[];
      assert.equal(history.at(-1).role, 'assistant');
      assert.equal(history.at(-1).content[0].text, 'the answer after the result, streamed slowly');
      assert.equal(await r.hget(k.meta, 'control'), '', 'cleared when the run ended');
    } finally {
      r.disconnect();
    }
  });

  it('a call offered again whose session was cancelled refuses both offers with task_cancelled', async () => {
    await a.req('PUT', '/v1/tools/flaky2', lookup);
    h.fake.enqueue(toolCalls([toolUse('flaky2', { id: 7 }, 'toolu_f2')]), text('ok'));
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['flaky2'] })).body.id;
    const first = (await a.post('/v1/tool-tasks/claim', { tools: ['flaky2'], wait_ms: 10000 })).body.tasks[0];
    // The first lease lapses; the sweep offers the call again, which wakes this claim.
    const second = (await a.post('/v1/tool-tasks/claim', { tools: ['flaky2'], wait_ms: 20000 })).body
      .tasks[0];
    assert.ok(second, 'offered again');
    assert.equal((await a.post(`/v1/sessions/${id}/cancel`)).status, 200);
    // The first offer is no longer the call's, but the worker is told to stop, not that the call goes on elsewhere.
    const hb = await a.post(`/v1/tool-tasks/${first.id}/heartbeat`);
    assert.equal(hb.status, 409);
    assert.equal(hb.body.error.code, 'task_cancelled');
    const late = await a.post(`/v1/tool-tasks/${first.id}/result`, { content: 'late' });
    assert.equal(late.body.error.code, 'task_cancelled');
    const r = await a.post(`/v1/tool-tasks/${second.id}/result`, { content: 'also late' });
    assert.equal(r.status, 409);
    assert.equal(r.body.error.code, 'task_cancelled');
  });

  it('after max_attempts lost leases, or past timeout_ms, the call gets an is_error result', async () => {
    await a.req('PUT', '/v1/tools/once', { ...lookup, max_attempts: 1 });
    await a.req('PUT', '/v1/tools/nobody', { ...lookup, timeout_ms: 1000 });
    h.fake.enqueue(
      toolCalls([toolUse('once', { id: 3 }, 'toolu_o1'), toolUse('nobody', { id: 4 }, 'toolu_n1')]),
      text('I could not.'),
    );
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['once', 'nobody'] })).body.id;
    const t = (await a.post('/v1/tool-tasks/claim', { tools: ['once'], wait_ms: 10000 })).body.tasks[0];
    assert.ok(t);
    await a.waitStatus(id, 'idle', 20000);
    const [once, nobody] = resultsSent(h, 1);
    assert.equal(once.is_error, true);
    assert.match(once.content, /^Error: no worker answered/);
    assert.equal(nobody.is_error, true);
    assert.match(nobody.content, /^Error: no worker answered within 1000 ms/);
    // The last attempt's lease lapsed and the call was answered with an error: nothing is offered again, so its
    // worker is told the call is settled, and why (task_lease_lost would say the call is offered again).
    for (const route of ['result', 'heartbeat']) {
      const late = await a.post(
        `/v1/tool-tasks/${t.id}/${route}`,
        route === 'result' ? { content: 'late' } : {},
      );
      assert.equal(late.status, 409, route);
      assert.equal(late.body.error.code, 'task_already_completed', route);
      assert.deepEqual(
        late.body.error.details,
        { reason: 'attempts_exhausted', attempts: 1, max_attempts: 1 },
        route,
      );
    }
  });

  it('a cancelled session refuses its task’s result with task_cancelled; an oversize result becomes an error', async () => {
    await a.req('PUT', '/v1/tools/slow', lookup);
    h.fake.enqueue(toolCalls([toolUse('slow', { id: 5 }, 'toolu_s1')]), text('ok'));
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['slow'] })).body.id;
    const t = (await a.post('/v1/tool-tasks/claim', { tools: ['slow'], wait_ms: 10000 })).body.tasks[0];
    const cancel = await a.post(`/v1/sessions/${id}/cancel`);
    assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
    const hb = await a.post(`/v1/tool-tasks/${t.id}/heartbeat`);
    assert.equal(hb.status, 409);
    assert.equal(hb.body.error.code, 'task_cancelled');
    const r = await a.post(`/v1/tool-tasks/${t.id}/result`, { content: 'too late' });
    assert.equal(r.status, 409);
    assert.equal(r.body.error.code, 'task_cancelled');

    h.fake.reset();
    h.fake.enqueue(toolCalls([toolUse('slow', { id: 6 }, 'toolu_s2')]), text('ok'));
    const id2 = (await a.post('/v1/sessions', { input: 'go', tools: ['slow'] })).body.id;
    const t2 = (await a.post('/v1/tool-tasks/claim', { tools: ['slow'], wait_ms: 10000 })).body.tasks[0];
    const blocks = [{ type: 'text', text: 'x'.repeat(300_000) }];
    const big = await a.post(`/v1/tool-tasks/${t2.id}/result`, { content: blocks });
    assert.equal(big.status, 200, JSON.stringify(big.body).slice(0, 300));
    await a.waitStatus(id2, 'idle');
    const [res] = resultsSent(h, 1);
    assert.equal(res.is_error, true);
    assert.match(res.content, /TOOL_RESULT_MAX_BYTES \(200000\)/);
  });

  it('a result body over its route’s limit is 413 naming that limit, not BODY_LIMIT; another route’s names BODY_LIMIT', async () => {
    // max(BODY_LIMIT 150000, 2 × TOOL_RESULT_MAX_BYTES 200000) = 400000: refused before any task is looked up.
    const over = await a.post('/v1/tool-tasks/tt_none/result', { content: 'x'.repeat(450_000) });
    assert.equal(over.status, 413, JSON.stringify(over.body).slice(0, 300));
    assert.equal(over.body.error.code, 'payload_too_large');
    assert.equal(
      over.body.error.message,
      "The request body is larger than the route's limit, max(BODY_LIMIT, 2×TOOL_RESULT_MAX_BYTES) = 400000 bytes.",
    );
    const claim = await a.post('/v1/tool-tasks/claim', { tools: ['x'.repeat(200_000)] });
    assert.equal(claim.status, 413);
    assert.equal(claim.body.error.code, 'payload_too_large');
    assert.equal(claim.body.error.message, 'The request body is larger than BODY_LIMIT (150000 bytes).');
  });
});

describe('tool tasks and the rate limit', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', RATE_LIMIT_PER_MIN: '5' } });
  });
  after(async () => h?.close());

  it('claims, heartbeats and results have their own budget: a busy worker leaves the tenant its session API', async () => {
    const a = h.api;
    assert.equal((await a.req('PUT', '/v1/tools/beats', lookup)).status, 201); // 1 of 5
    // A fleet's claims (a claim per task at least) are the worker's too.
    for (let i = 0; i < 20; i++) {
      const c = await a.post('/v1/tool-tasks/claim', { tools: ['beats'], wait_ms: 0 });
      assert.equal(c.status, 200, `claim ${i}: ${JSON.stringify(c.body)}`);
    }
    h.fake.enqueue(toolCalls([toolUse('beats', { id: 1 }, 'toolu_b1')]), text('ok'));
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['beats'] })).body.id; // 2
    const t = (await a.post('/v1/tool-tasks/claim', { tools: ['beats'], wait_ms: 10000 })).body.tasks[0];
    for (let i = 0; i < 20; i++) {
      const hb = await a.post(`/v1/tool-tasks/${t.id}/heartbeat`);
      assert.equal(hb.status, 200, `heartbeat ${i}: ${JSON.stringify(hb.body)}`);
    }
    assert.equal((await a.post(`/v1/tool-tasks/${t.id}/result`, { content: 'done' })).status, 200);
    await a.waitStatus(id, 'idle');
    assert.equal((await a.post('/v1/sessions', { start: false })).status, 201); // 3
  });

  it('claims have a count of their own: a fleet polling hard never starves the leases it holds', async () => {
    const a = h.api;
    h.fake.enqueue(toolCalls([toolUse('beats', { id: 2 }, 'toolu_b2')]), text('ok'));
    const id = (await a.post('/v1/sessions', { input: 'go', tools: ['beats'] })).body.id; // 4 of 5
    const t = (await a.post('/v1/tool-tasks/claim', { tools: ['beats'], wait_ms: 10000 })).body.tasks[0];
    assert.ok(t, 'the task is claimed');
    // Claims until their count (10 × 5 a minute, the earlier test's 21 and 22 included) is used up.
    let refused = null;
    for (let i = 0; i < 60 && !refused; i++) {
      const c = await a.post('/v1/tool-tasks/claim', { tools: ['beats'], wait_ms: 0 });
      if (c.status === 429) refused = c;
      else assert.equal(c.status, 200, JSON.stringify(c.body));
    }
    assert.equal(refused?.body.error.code, 'rate_limited');
    const hb = await a.post(`/v1/tool-tasks/${t.id}/heartbeat`);
    assert.equal(hb.status, 200, JSON.stringify(hb.body));
    assert.equal((await a.post(`/v1/tool-tasks/${t.id}/result`, { content: 'done' })).status, 200);
    await a.waitStatus(id, 'idle');
  });
});

describe('tool tasks of cancelled and deleted sessions', () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TOOL_TASKS_MAX_PER_TENANT: '2' } });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  it('leave the queue at once: they no longer count in TOOL_TASKS_MAX_PER_TENANT', async () => {
    const a = h.api;
    await a.req('PUT', '/v1/tools/queued_tool', lookup);
    /** A session whose call is in the queue (a record under its id; a refused call would have none). */
    const park = async () => {
      // (Only the call: every session here stays parked, cancelled or deleted.)
      h.fake.enqueue(toolCalls([toolUse('queued_tool', { id: 1 })]));
      const id = (await a.post('/v1/sessions', { input: 'go', tools: ['queued_tool'] })).body.id as string;
      await until(
        async () => (await r.hkeys('tt:{tt:acme}:calls')).some((k) => k.startsWith(`${id}:`)),
        20_000,
        'the call queued',
      );
      return id;
    };
    const first = await park();
    const second = await park();
    assert.equal((await a.post(`/v1/sessions/${first}/cancel`)).status, 200);
    assert.equal((await a.req('DELETE', `/v1/sessions/${second}`)).status, 200);
    // Two more calls fit in the queue; a worker gets them (and nothing of the sessions that are gone).
    const third = await park();
    const fourth = await park();
    const claimed = (await a.post('/v1/tool-tasks/claim', { tools: ['queued_tool'], max: 10, wait_ms: 5000 }))
      .body.tasks as Array<{ session_id: string }>;
    assert.deepEqual(claimed.map((t) => t.session_id).sort(), [third, fourth].sort());
  });
});

describe('GET and DELETE /v1/tools/:name of a tool that is not the tenant’s', { timeout: 240_000 }, () => {
  let h: Harness;
  let shared: TestMcpServer;
  let acmeOnly: TestMcpServer;
  let a: Api;
  let b: Api;
  before(async () => {
    [shared, acmeOnly] = await Promise.all([startMcpServer(), startMcpServer()]);
    // A tool only the server declared for acme offers.
    await acmeOnly.addTool('ledger_lookup');
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-a,globex:key-b',
        MCP_SERVERS: JSON.stringify({
          shared: { url: shared.url },
          ledger: { url: acmeOnly.url, tenants: ['acme'] },
          // Never answers: every listing below meets a server that cannot be reached.
          down: { url: 'http://127.0.0.1:9/mcp' },
        }),
      },
    });
    a = h.api;
    b = h.api.as('key-b');
  });
  after(async () => {
    await h?.close();
    await shared?.kill();
    await acmeOnly?.kill();
  });

  /** The first entry GET /v1/tools lists under `name` for `api`'s tenant. */
  const listed = async (api: Api, name: string) => {
    const list = await api.get('/v1/tools');
    assert.equal(list.status, 200, JSON.stringify(list.body));
    return list.body.data.find((t: any) => t.name === name);
  };

  it('GET answers a server tool or a visible MCP tool with its GET /v1/tools entry; another tenant’s MCP server’s tool is 404', async () => {
    const list = await a.get('/v1/tools');
    assert.equal(list.status, 200, JSON.stringify(list.body));
    assert.deepEqual(
      list.body.mcp_servers.map((s: any) => [s.name, s.reachable]),
      [
        ['shared', true],
        ['ledger', true],
        ['down', false],
      ],
    );
    const names = [...new Set((list.body.data as any[]).map((t) => t.name as string))];
    for (const n of ['get_weather', 'calculate_sum', 'echo', 'ledger_lookup'])
      assert.ok(names.includes(n), n);
    // Every tool listed answers alone, with the first entry of its name (echo is listed for shared and ledger).
    for (const name of names) {
      const one = await a.get(`/v1/tools/${name}`);
      assert.equal(one.status, 200, `${name}: ${JSON.stringify(one.body)}`);
      assert.deepEqual(
        one.body,
        list.body.data.find((t: any) => t.name === name),
        name,
      );
      assert.equal(one.headers.get('etag'), null, 'only a tenant tool has a revision');
    }
    assert.equal((await a.get('/v1/tools/echo')).body.mcp_server, 'shared');
    assert.equal((await a.get('/v1/tools/ledger_lookup')).body.mcp_server, 'ledger');

    // globex may not use "ledger": its tool is not listed, and not answered.
    assert.equal(await listed(b, 'ledger_lookup'), undefined);
    const hidden = await b.get('/v1/tools/ledger_lookup');
    assert.equal(hidden.status, 404, JSON.stringify(hidden.body));
    assert.equal(hidden.body.error.code, 'tool_not_found');
    const echo = await b.get('/v1/tools/echo');
    assert.equal(echo.status, 200);
    assert.deepEqual(echo.body, await listed(b, 'echo'));
    assert.equal((await a.get('/v1/tools/no_such_tool')).status, 404);
  });

  it('DELETE of a server tool or a visible MCP tool is 409 tool_name_conflict; a tenant tool of that name comes first', async () => {
    for (const [api, name, server] of [
      [a, 'echo', 'shared'],
      [b, 'echo', 'shared'],
      [a, 'ledger_lookup', 'ledger'],
    ] as const) {
      const r = await api.req('DELETE', `/v1/tools/${name}`);
      assert.equal(r.status, 409, `${name}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, 'tool_name_conflict');
      assert.deepEqual(r.body.error.details, { tool: name, mcp_server: server });
    }
    const serverTool = await a.req('DELETE', '/v1/tools/get_weather');
    assert.equal(serverTool.status, 409);
    assert.equal(serverTool.body.error.code, 'tool_name_conflict');
    // Not visible to globex: nothing of that name for it.
    const hidden = await b.req('DELETE', '/v1/tools/ledger_lookup');
    assert.equal(hidden.status, 404, JSON.stringify(hidden.body));
    assert.equal(hidden.body.error.code, 'tool_not_found');
    assert.equal((await a.req('DELETE', '/v1/tools/no_such_tool')).status, 404);

    // A tenant tool may take an MCP tool's name (PUT allows it): GET and DELETE are then about the tenant's tool.
    assert.equal((await a.req('PUT', '/v1/tools/echo', lookup)).status, 201);
    const mine = await a.get('/v1/tools/echo');
    assert.equal(mine.status, 200);
    assert.deepEqual(mine.body.runner, { type: 'worker' });
    assert.equal(mine.headers.get('etag'), '"1"');
    const removed = await a.req('DELETE', '/v1/tools/echo');
    assert.equal(removed.status, 200, JSON.stringify(removed.body));
    assert.deepEqual(removed.body, { name: 'echo', deleted: true });
    assert.equal((await a.get('/v1/tools/echo')).body.mcp_server, 'shared');
    assert.equal((await a.req('DELETE', '/v1/tools/echo')).status, 409);
  });

  it('an MCP server that stops answering counts as GET /v1/tools counts it (its last known tools), never a 5xx', async () => {
    const known = await a.get('/v1/tools/ledger_lookup');
    assert.equal(known.status, 200);
    await acmeOnly.kill();
    // Once listed, a server's tools stay listed by their last known list (src/mcp/pool.ts listTools): the name
    // answers as before, and is still not the tenant's to remove.
    for (let i = 0; i < 3; i++) {
      const one = await a.get('/v1/tools/ledger_lookup');
      assert.equal(one.status, 200, JSON.stringify(one.body));
      assert.deepEqual(one.body, known.body);
      assert.deepEqual(await listed(a, 'ledger_lookup'), known.body);
      const del = await a.req('DELETE', '/v1/tools/ledger_lookup');
      assert.equal(del.status, 409, JSON.stringify(del.body));
    }
  });
});
