/**
 * Tool workers built from the typed client (`ToolWorker` with the SDK's `betaZodTool`), and the durability of tool
 * tasks: a worker SIGKILLed mid-call (the call is offered again, once, to another worker, under the same
 * idempotency key), and a service replica SIGKILLed while a task is out (another replica takes the result and the
 * session completes).
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import { betaZodTool } from '@anthropic-ai/sdk/helpers/beta/zod';
import { ToolError } from '@anthropic-ai/sdk/lib/tools/ToolError';
import { runRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import { z } from 'zod';
import { ToolWorker } from '../../packages/client/src/index.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';

const resultsSent = (fake: FakeAnthropic, i: number): any[] =>
  (fake.requests[i]!.messages.at(-1)!.content as any[]).filter((b: any) => b.type === 'tool_result');

const eventsOf = async (api: Api, id: string, type: string): Promise<any[]> =>
  ((await api.get(`/v1/sessions/${id}/events?limit=500`)).body.data as any[]).filter((e) => e.type === type);

const shipOrder = (who: string) =>
  betaZodTool({
    name: 'ship_order',
    description: 'Ship an order.',
    inputSchema: z.object({ order: z.number() }),
    run: async ({ order }, context) => {
      const task = (context as { task?: { idempotency_key: string } } | undefined)?.task;
      return `order ${order} shipped by ${who} (${task?.idempotency_key})`;
    },
  });

/** Returns what no tool result may hold (an object as content): the service refuses it with a 400. */
const malformed = betaZodTool({
  name: 'malformed_order',
  description: 'Answers with an object.',
  inputSchema: z.object({}),
  run: async () => {
    runs.malformed++;
    return { not: 'content' } as unknown as string;
  },
});
const runs = { malformed: 0 };

const refuse = betaZodTool({
  name: 'refuse_order',
  description: 'Refuses, with blocks.',
  inputSchema: z.object({}),
  run: async () => {
    throw new ToolError([{ type: 'text', text: 'refused: out of stock' }]);
  },
});

/** A worker process (test/fixtures/ship-worker.ts) and the JSON lines it prints. */
function spawnWorker(env: Record<string, string>) {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'test/fixtures/ship-worker.ts'], {
    env: { PATH: process.env['PATH'] ?? '', HOME: process.env['HOME'] ?? '/tmp', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: any[] = [];
  const waiters: Array<() => void> = [];
  createInterface({ input: child.stdout! }).on('line', (l) => {
    try {
      lines.push(JSON.parse(l));
    } catch {
      return;
    }
    for (const w of waiters.splice(0)) w();
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return {
    child,
    lines,
    exited,
    async waitLine(pred: (l: any) => boolean): Promise<any> {
      for (;;) {
        const hit = lines.find(pred);
        if (hit) return hit;
        await new Promise<void>((r) => waiters.push(r));
      }
    },
  };
}

describe('tool workers', { timeout: 240_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TOOL_TASK_LEASE_MS: '1000' } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('a ToolWorker runs the SDK’s own betaZodTool objects: parse, run, ToolError blocks, Error: wrapping', async () => {
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: 'key-a',
      tools: [shipOrder('in-proc'), refuse, malformed],
      concurrency: 3,
      workerId: 'in-proc',
      waitMs: 2000,
    });
    await worker.start();
    try {
      const listed = (await h.api.get('/v1/tools')).body.data.find((t: any) => t.name === 'ship_order');
      assert.equal(listed.source, 'tenant');
      assert.equal(listed.input_schema.properties.order.type, 'number', 'the schema from the zod tool');
      h.fake.enqueue(
        toolCalls([
          toolUse('ship_order', { order: 1 }, 'toolu_ok'),
          toolUse('ship_order', { order: 'one' }, 'toolu_bad'),
          toolUse('refuse_order', {}, 'toolu_refuse'),
          toolUse('malformed_order', {}, 'toolu_malformed'),
        ]),
        text('Done.'),
      );
      const id = (
        await h.api.post('/v1/sessions', {
          input: 'ship',
          tools: ['ship_order', 'refuse_order', 'malformed_order'],
        })
      ).body.id;
      await h.api.waitStatus(id, 'idle', 30_000);
      const [ok, bad, refused, malformedResult] = resultsSent(h.fake, 1);
      // A result the service refuses is answered as an error once: the tool ran once, not on every attempt.
      assert.equal(malformedResult.is_error, true);
      assert.match(malformedResult.content, /^Error: the service refused the tool's result \(HTTP 400 /);
      assert.equal(runs.malformed, 1);
      assert.deepEqual(ok, {
        type: 'tool_result',
        tool_use_id: 'toolu_ok',
        content: `order 1 shipped by in-proc (${id}:toolu_ok)`,
      });
      assert.equal(bad.is_error, true);
      assert.match(bad.content, /^Error: /, 'a zod parse error, as the SDK runner words it');
      assert.equal(refused.is_error, true);
      assert.deepEqual(refused.content, [{ type: 'text', text: 'refused: out of stock' }]);
    } finally {
      await worker.stop();
    }
  });

  /** A tool that takes three leases run by a worker whose requests go through `through`: one attempt, no lease lost. */
  async function slowToolHeldThrough(through: (req: Request) => Promise<Response>, workerId: string) {
    const slow = betaZodTool({
      name: 'slow_order',
      description: 'Takes three leases.',
      inputSchema: z.object({}),
      run: async () => {
        await new Promise((r) => setTimeout(r, 3000));
        return 'slow done';
      },
    });
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: 'key-a',
      tools: [slow],
      workerId,
      waitMs: 2000,
      fetch: through,
    });
    await worker.start();
    try {
      h.fake.enqueue(toolCalls([toolUse('slow_order', {}, 'toolu_slow')]), text('Done.'));
      const id = (await h.api.post('/v1/sessions', { input: 'slow', tools: ['slow_order'] })).body.id;
      await h.api.waitStatus(id, 'idle', 30_000);
      assert.equal(resultsSent(h.fake, 1)[0].content, 'slow done');
      assert.deepEqual(await eventsOf(h.api, id, 'tool_task.retried'), []);
      assert.deepEqual(
        (await eventsOf(h.api, id, 'tool.started')).map((e) => e.data.attempt),
        [1],
      );
    } finally {
      await worker.stop();
    }
  }

  /** `res` with its Date moved by `ms`, and its body made by `body` from its text. */
  async function withDate(res: Response, ms: number, body = (text: string) => text): Promise<Response> {
    const headers = new Headers(res.headers);
    headers.delete('content-length');
    headers.set('date', new Date(Date.parse(res.headers.get('date')!) + ms).toUTCString());
    return new Response(body(await res.text()), { status: res.status, headers });
  }

  it('a worker whose clock is 10 s behind the service’s heartbeats in time: one attempt, no lease lost', async () => {
    const SKEW = 10_000;
    // The service's clock, as this worker sees it: its Date header and lease_expires_at 10 s ahead.
    const skewed = async (req: Request): Promise<Response> =>
      withDate(await fetch(req), SKEW, (body) => {
        if (!req.url.endsWith('/claim') || !body.startsWith('{"tasks"')) return body;
        const claimed = JSON.parse(body) as { tasks: Array<{ lease_expires_at: string }> };
        for (const t of claimed.tasks)
          t.lease_expires_at = new Date(Date.parse(t.lease_expires_at) + SKEW).toISOString();
        return JSON.stringify(claimed);
      });
    await slowToolHeldThrough(skewed, 'skewed');
  });

  it('behind a proxy that sends its own Date, 10 s behind the service’s clock, the worker still heartbeats in time', async () => {
    // As nginx does unless told `proxy_pass_header Date`: lease_expires_at less that Date would be 10 s too long a
    // lease; the answer's lease_ms needs no clock.
    const proxied = async (req: Request): Promise<Response> => withDate(await fetch(req), -10_000);
    await slowToolHeldThrough(proxied, 'proxied');
  });

  it('a thrown Error’s content field is the SDK’s `Error: <message>`; a ToolError subclass’s content is its own', async () => {
    class OutOfStock extends ToolError {}
    const plain = betaZodTool({
      name: 'plain_error',
      description: 'Throws an Error with a content field.',
      inputSchema: z.object({}),
      run: async () => {
        throw Object.assign(new Error('boom'), { content: 'raw content' });
      },
    });
    const sub = betaZodTool({
      name: 'sub_error',
      description: 'Throws a ToolError subclass.',
      inputSchema: z.object({}),
      run: async () => {
        throw new OutOfStock([{ type: 'text', text: 'out of stock' }]);
      },
    });
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: 'key-a',
      tools: [plain, sub],
      workerId: 'errors',
      waitMs: 2000,
    });
    await worker.start();
    try {
      h.fake.enqueue(
        toolCalls([toolUse('plain_error', {}, 'toolu_plain'), toolUse('sub_error', {}, 'toolu_sub')]),
        text('Done.'),
      );
      const id = (await h.api.post('/v1/sessions', { input: 'err', tools: ['plain_error', 'sub_error'] }))
        .body.id;
      await h.api.waitStatus(id, 'idle', 30_000);
      const [p, s] = resultsSent(h.fake, 1);
      const sdk = await runRunnableTool(plain, {}, { toolUse: {}, toolUseBlock: {} } as never);
      assert.equal(sdk.content, 'Error: boom');
      assert.equal(p.content, sdk.content);
      assert.equal(p.is_error, true);
      assert.deepEqual(s.content, [{ type: 'text', text: 'out of stock' }]);
      assert.equal(s.is_error, true);
    } finally {
      await worker.stop();
    }
  });

  it('a betaZodTool that returns nothing answers as the SDK’s runner does: an empty result, not an error', async () => {
    // The SDK's runner sends such a call's tool_result without content; the worker sent `{"is_error": false}` without
    // content, which the service refused (400), so the call was answered "the service refused the tool's result".
    const quiet = betaZodTool({
      name: 'quiet_order',
      description: 'Returns nothing.',
      inputSchema: z.object({}),
      run: async () => undefined as unknown as string,
    });
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: 'key-a',
      tools: [quiet],
      workerId: 'quiet',
      waitMs: 2000,
    });
    await worker.start();
    try {
      h.fake.enqueue(toolCalls([toolUse('quiet_order', {}, 'toolu_quiet')]), text('Done.'));
      const id = (await h.api.post('/v1/sessions', { input: 'quiet', tools: ['quiet_order'] })).body.id;
      await h.api.waitStatus(id, 'idle', 30_000);
      const sdk = await runRunnableTool(quiet, {}, { toolUse: {}, toolUseBlock: {} } as never);
      assert.deepEqual(sdk, { content: undefined, isError: false }, 'the SDK’s runner: no content, no error');
      // As the service's own runner stores an SDK tool_result without content (src/engine/turns.ts): ''.
      assert.deepEqual(resultsSent(h.fake, 1), [
        { type: 'tool_result', tool_use_id: 'toolu_quiet', content: '' },
      ]);
      const [completed] = await eventsOf(h.api, id, 'tool.completed');
      assert.equal(completed.data.is_error, false);
    } finally {
      await worker.stop();
    }
  });

  it('a worker SIGKILLed mid-call: the call is offered once more, to another worker, with the same key', async () => {
    const a = spawnWorker({ BASE_URL: h.service.url, API_KEY: 'key-a', WORKER_ID: 'doomed', HANG: '1' });
    await a.waitLine((l) => l.ready);
    h.fake.enqueue(toolCalls([toolUse('ship_order', { order: 9 }, 'toolu_kill')]), text('Shipped.'));
    const id = (await h.api.post('/v1/sessions', { input: 'ship 9', tools: ['ship_order'] })).body.id;
    const started = await a.waitLine((l) => l.started);
    assert.equal(started.started.attempt, 1);
    a.child.kill('SIGKILL');
    await a.exited;
    const b = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: 'key-a',
      tools: [shipOrder('survivor')],
      workerId: 'survivor',
      waitMs: 2000,
    });
    await b.start();
    try {
      await h.api.waitStatus(id, 'idle', 30_000);
    } finally {
      await b.stop();
    }
    const [res] = resultsSent(h.fake, 1);
    assert.equal(res.content, `order 9 shipped by survivor (${started.started.idempotency_key})`);
    assert.equal(started.started.idempotency_key, `${id}:toolu_kill`);
    const starts = await eventsOf(h.api, id, 'tool.started');
    assert.deepEqual(
      starts.map((e) => [e.data.attempt, e.data.worker_id]),
      [
        [1, 'doomed'],
        [2, 'survivor'],
      ],
    );
    assert.equal((await eventsOf(h.api, id, 'tool_task.retried')).length, 1);
    assert.equal((await eventsOf(h.api, id, 'tool.completed')).length, 1);
  });
});

describe('a service replica SIGKILLed while a task is out', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let reps: ServiceProcess[] = [];
  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    const env = serviceEnv(redis.url, fake.url, { API_KEYS: 'acme:key-a' });
    reps = await Promise.all([spawnService(env, { name: 'rep1' }), spawnService(env, { name: 'rep2' })]);
  });
  after(async () => {
    await Promise.all(reps.map((p) => p.kill()));
    await fake?.close();
    await redis?.stop();
  });

  it('another replica takes the result and the session completes', async () => {
    const [one, two] = reps as [ServiceProcess, ServiceProcess];
    const a1 = one.api.as('key-a');
    const a2 = two.api.as('key-a');
    const put = await a1.req('PUT', '/v1/tools/ship_order', {
      description: 'Ship an order.',
      input_schema: { type: 'object', properties: { order: { type: 'number' } } },
      runner: { type: 'worker' },
    });
    assert.equal(put.status, 201);
    fake.enqueue(toolCalls([toolUse('ship_order', { order: 3 }, 'toolu_rep')]), text('Shipped.'));
    const id = (await a1.post('/v1/sessions', { input: 'ship 3', tools: ['ship_order'] })).body.id;
    const claimed = await a1.post('/v1/tool-tasks/claim', { tools: ['ship_order'], wait_ms: 20000 });
    const task = claimed.body.tasks[0];
    assert.ok(task, JSON.stringify(claimed.body));
    await one.kill();
    assert.equal((await a2.post(`/v1/tool-tasks/${task.id}/heartbeat`)).status, 200);
    const res = await a2.post(`/v1/tool-tasks/${task.id}/result`, { content: 'shipped' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const done = await a2.waitStatus(id, 'idle', 30_000);
    assert.equal(done.stop_reason, 'end_turn');
    assert.equal(resultsSent(fake, 1)[0].content, 'shipped');
  });
});

describe('a ToolWorker across a restart of the service', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let svc: ServiceProcess | null = null;
  after(async () => {
    await svc?.kill();
    await fake?.close();
    await redis?.stop();
  });

  it('claims again once the service is back, and runs the next session’s calls', async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    const port = await new Promise<number>((resolve) => {
      const srv = createServer().listen(0, '127.0.0.1', () => {
        const p = (srv.address() as AddressInfo).port;
        srv.close(() => resolve(p));
      });
    });
    const env = serviceEnv(redis.url, fake.url, { API_KEYS: 'acme:key-a', PORT: String(port) });
    svc = await spawnService(env, { name: 'first' });
    const errors: string[] = [];
    const worker = new ToolWorker({
      baseUrl: svc.url,
      apiKey: 'key-a',
      tools: [shipOrder('steady')],
      workerId: 'steady',
      waitMs: 1000,
      onError: (_e, what) => errors.push(what),
    });
    await worker.start();
    try {
      const run = async (api: Api, order: number) => {
        fake.enqueue(toolCalls([toolUse('ship_order', { order }, `toolu_r${order}`)]), text('Shipped.'));
        const id = (await api.post('/v1/sessions', { input: `ship ${order}`, tools: ['ship_order'] })).body
          .id;
        await api.waitStatus(id, 'idle', 60_000);
        return id;
      };
      const first = await run(svc.api.as('key-a'), 1);
      assert.match(resultsSent(fake, 1)[0].content, /order 1 shipped by steady/);
      await svc.kill();
      svc = await spawnService(env, { name: 'second' });
      const second = await run(svc.api.as('key-a'), 2);
      assert.notEqual(first, second);
      assert.match(
        resultsSent(fake, 3)[0].content,
        new RegExp(`order 2 shipped by steady \\(${second}:toolu_r2\\)`),
      );
      assert.ok(errors.includes('claim'), 'the worker saw the service go and rode it out');
    } finally {
      await worker.stop();
    }
  });
});
