/**
 * The tool task queue's costs stay bounded by what is in flight, not by its past (found by a probe): the sweep takes
 * a tenant off `tt:due` once its queue has nothing left to watch (and a timeout fires on time behind thousands of
 * such tenants), the HTTP caller takes a tenant off `tt:http` once it has no http call queued, the workers set keeps
 * only the tenant's tools, recent and capped; a long-poll claim hears a call queued before it listened; and of two
 * PUTs making one http tool at once, exactly one shows a secret, the one that signs the calls. And a worker still
 * holding a call that timed out is told so by its refusal (its lease, TOOL_TASK_LEASE_MS here, outlasts the timeout).
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { Webhook } from 'standardwebhooks';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';
import { monitorRedis } from '../helpers/redis-monitor.js';
import { isQuota, type QuotaExceeded } from '../../src/errors.js';
import { CLAIM_MAX_BYTES, TaskQueue, type ClaimLeft } from '../../src/tenant-tools/tasks.js';

const lookup = {
  description: 'Look an order up.',
  input_schema: { type: 'object', properties: { id: { type: 'number' } }, required: ['id'] },
  runner: { type: 'worker' },
};

describe('the tool task queue, with many past tenants', { timeout: 180_000 }, () => {
  let h: Harness;
  let r: Redis;
  let server: http.Server;
  let url = '';
  const calls: Array<{ raw: string; headers: http.IncomingHttpHeaders }> = [];
  before(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        calls.push({ raw: Buffer.concat(chunks).toString('utf8'), headers: req.headers });
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ content: 'ok' }));
      });
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/tool`;
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-a',
        TOOL_TASK_LEASE_MS: '20000',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        TOOL_TASK_MAX_WAITING_CLAIMS: '4',
      },
    });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
    server?.closeAllConnections();
    await new Promise<void>((done) => (server ? server.close(() => done()) : done()));
  });
  beforeEach(() => h.fake.reset());

  it('idle tenants leave tt:due; a 1000 ms timeout fires on time behind 12000 of them', async () => {
    const now = Date.now();
    const args: Array<number | string> = [];
    for (let i = 0; i < 12_000; i++) args.push(now - 60_000 + Math.floor(i * 5), `past-tenant-${i}`);
    await r.zadd('tt:due', ...args);
    await h.api.req('PUT', '/v1/tools/nobody', { ...lookup, timeout_ms: 1000 });
    h.fake.enqueue(toolCalls([toolUse('nobody', { id: 1 })]), text('fin'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['nobody'] })).body.id;
    // At 50 tenants per 500 ms tick this took two minutes: every past tenant is swept once, then forgotten (quiet
    // machine: ~5 s; the bound is the wait, not a timing claim).
    await h.api.waitStatus(id, 'idle', 60_000);
    const result = (h.fake.requests[1]!.messages.at(-1)!.content as any[])[0];
    assert.match(result.content, /no worker answered within 1000 ms/);
    // acme is left, holding a tombstone (a day): due when that goes, not every lease.
    await until(
      async () =>
        (await r.zcard('tt:due')) === 1 && Number(await r.zscore('tt:due', 'acme')) > Date.now() + 3_600_000,
      30_000,
      'only acme left in tt:due, due in a day',
    );
  });

  /** Runs one call of the http tool `name` in a new session; the request its URL got. */
  const callHttpTool = async (name: string) => {
    h.fake.enqueue(toolCalls([toolUse(name, { id: 1 })]), text('fin'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: [name] })).body.id;
    await h.api.waitStatus(id, 'idle', 30_000);
    return calls.at(-1)!;
  };

  it('tenants without http calls leave tt:http; one with a call comes back, and leaves once it is answered', async () => {
    await r.sadd('tt:http', ...Array.from({ length: 2000 }, (_, i) => `past-tenant-${i}`));
    await until(async () => (await r.scard('tt:http')) === 0, 30_000, 'tt:http emptied');
    await h.api.req('PUT', '/v1/tools/plain', { ...lookup, runner: { type: 'http', url } });
    const call = await callHttpTool('plain');
    assert.equal(JSON.parse(call.raw).name, 'plain');
    await until(async () => (await r.scard('tt:http')) === 0, 10_000, 'acme left tt:http');
  });

  it('of PUTs making one http tool at once, one shows a secret: the one the calls are signed with', async () => {
    const body = { ...lookup, runner: { type: 'http', url } };
    const puts = await Promise.all([1, 2, 3, 4].map(() => h.api.req('PUT', '/v1/tools/signed', body)));
    const withSecret = puts.filter((p) => p.body.secret !== undefined);
    assert.equal(withSecret.length, 1, JSON.stringify(puts.map((p) => [p.status, p.body.secret])));
    assert.equal(withSecret[0]!.status, 201);
    assert.deepEqual(puts.map((p) => p.status).sort(), [200, 200, 200, 201]);
    const call = await callHttpTool('signed');
    new Webhook(withSecret[0]!.body.secret).verify(call.raw, {
      'webhook-id': String(call.headers['webhook-id']),
      'webhook-timestamp': String(call.headers['webhook-timestamp']),
      'webhook-signature': String(call.headers['webhook-signature']),
    });
    // A replace keeps the secret and its tool's created_at, and shows neither secret nor a new created_at.
    const again = await h.api.req('PUT', '/v1/tools/signed', body);
    assert.equal(again.body.secret, undefined);
    assert.equal(again.body.created_at, withSecret[0]!.body.created_at);
    const call2 = await callHttpTool('signed');
    new Webhook(withSecret[0]!.body.secret).verify(call2.raw, {
      'webhook-id': String(call2.headers['webhook-id']),
      'webhook-timestamp': String(call2.headers['webhook-timestamp']),
      'webhook-signature': String(call2.headers['webhook-signature']),
    });
  });

  it('the workers set keeps only the tenant’s tools, seen within a day, at most 1000 pairs', async () => {
    await h.api.req('PUT', '/v1/tools/lk', lookup);
    for (let i = 0; i < 5; i++) {
      const tools = ['lk', ...Array.from({ length: 63 }, (_, j) => `not_a_tool_${i}_${j}`)];
      const c = await h.api.post('/v1/tool-tasks/claim', { tools, wait_ms: 0, worker_id: `w-${i}` });
      assert.equal(c.status, 200);
    }
    assert.deepEqual(
      (await r.zrange('tt:{tt:acme}:workers', 0, -1)).sort(),
      [0, 1, 2, 3, 4].map((i) => `lk w-${i}`),
    );
    const queue: TaskQueue = h.service.app.toolTasks.queue;
    await queue.seen('acme', ['lk'], 'old-worker', 2 * 86_400_000);
    for (let i = 0; i < 1100; i++) await queue.seen('acme', ['lk'], `fleet-${i}`);
    const kept = await r.zrange('tt:{tt:acme}:workers', 0, -1);
    assert.equal(kept.length, 1000);
    assert.ok(!kept.includes('lk old-worker'));
    assert.ok(kept.includes('lk fleet-1099') && !kept.includes('lk fleet-0'), 'the newest are kept');
    const listed = (await h.api.get('/v1/tools/lk')).body.workers;
    assert.equal(listed.active, 1000);
  });

  it('a long-poll claim gets a call queued after its first empty claim, before it listened', async () => {
    await h.api.req('PUT', '/v1/tools/lk', lookup);
    const queue: TaskQueue = h.service.app.toolTasks.queue;
    const claim = queue.claim.bind(queue);
    let session = '';
    let first = true;
    // The call is queued (and its wake-up published) after the claim found nothing and before it subscribed.
    queue.claim = async (...args: Parameters<TaskQueue['claim']>) => {
      const got = await claim(...args);
      if (first && got.length === 0 && args[3] === 'w') {
        first = false;
        h.fake.enqueue(toolCalls([toolUse('lk', { id: 1 })]), text('fin'));
        session = (await h.api.post('/v1/sessions', { input: 'go', tools: ['lk'] })).body.id;
        await until(async () => (await r.zcard('tt:{tt:acme}:ready')) === 1, 10_000, 'the call queued');
      }
      return got;
    };
    try {
      const t0 = Date.now();
      const c = await h.api.post('/v1/tool-tasks/claim', { tools: ['lk'], wait_ms: 15_000, worker_id: 'w' });
      assert.equal(c.body.tasks.length, 1);
      assert.equal(c.body.tasks[0].session_id, session);
      assert.ok(Date.now() - t0 < 8000, `answered after ${Date.now() - t0} ms`);
      await h.api.post(`/v1/tool-tasks/${c.body.tasks[0].id}/result`, { content: 'found' });
      await h.api.waitStatus(session, 'idle', 20_000);
    } finally {
      queue.claim = claim;
    }
  });
  it('a claim reads only the queues of the tools it asks for, not the calls of other tools', async () => {
    const queue: TaskQueue = h.service.app.toolTasks.queue;
    const task = (name: string, i: number) => ({
      session: `s-idx-${name}-${i}`,
      toolUseId: `tu-${i}`,
      round: 0,
      name,
      input: { i },
      runner: 'worker' as const,
      maxAttempts: 3,
      timeoutMs: 600_000,
    });
    for (let i = 0; i < 300; i++) assert.equal(await queue.enqueue('idx', task('nobody', i)), 'queued');
    assert.equal(await queue.enqueue('idx', task('busy', 0)), 'queued');
    await queue.claim('idx', ['warm'], 1, 'w'); // a first claim of the tenant indexes what was queued before
    const monitor = await monitorRedis(h.redis.port);
    let got: Awaited<ReturnType<TaskQueue['claim']>>;
    try {
      got = await queue.claim('idx', ['busy'], 5, 'w');
      await monitor.settle();
    } finally {
      monitor.stop();
    }
    assert.deepEqual(
      got.map((g) => g.rec.name),
      ['busy'],
    );
    // The tenant's queues as scripts read them (the service's own sweeps run beside the claim, on other keys).
    const reads = monitor.scripted
      .map((c) => c.join(' '))
      .filter((l) => /^(zrange|zrangebyscore) tt:\{tt:idx\}:ready/i.test(l));
    assert.ok(reads.length > 0, 'the claim script ran under MONITOR');
    assert.ok(
      reads.every((l) => l.split(' ')[1] === 'tt:{tt:idx}:ready:busy'),
      `the claim read only the busy queue: ${reads.join(' | ')}`,
    );
    // The other tool's calls are still there, each found by a claim of it, oldest first.
    const others = await queue.claim('idx', ['nobody', 'busy'], 3, 'w');
    assert.deepEqual(
      others.map((g) => g.rec.session),
      ['s-idx-nobody-0', 's-idx-nobody-1', 's-idx-nobody-2'],
    );
  });

  it('a claim answers at most TOOL_TASK_CLAIM_MAX_BYTES of inputs, one call at least; the rest wait for the next claim', async () => {
    assert.equal(h.service.app.toolTasks.queue.claimMaxBytes, CLAIM_MAX_BYTES, 'the default bound');
    // A queue of its own on a client of its own (no auto-pipelining), whose claim script's answers are counted.
    const own = new Redis(h.redis.url);
    const queue = new TaskQueue(own, 20_000, 1000);
    const script = own.ttClaim.bind(own);
    const answered: number[] = [];
    own.ttClaim = (async (...args: Parameters<typeof script>) => {
      const rows = await script(...args);
      answered.push(rows.reduce<number>((n, r) => n + Buffer.byteLength(String(r)), 0));
      return rows;
    }) as typeof own.ttClaim;
    const MB = 1_000_000;
    const task = (i: number, bytes: number) => ({
      session: `s-bulky-${i}`,
      toolUseId: `tu-${i}`,
      round: 0,
      name: 'bulky',
      input: { q: 'x'.repeat(bytes) },
      runner: 'worker' as const,
      maxAttempts: 3,
      timeoutMs: 600_000,
    });
    try {
      // Eight calls of 1 MB inputs (as approvals that edit the input make them), then one of 5 MB, past the bound.
      for (let i = 0; i < 8; i++) assert.equal(await queue.enqueue('bulky', task(i, MB)), 'queued');
      assert.equal(await queue.enqueue('bulky', task(8, 5 * MB)), 'queued');
      const claims: string[][] = [];
      const more: boolean[] = [];
      for (let i = 0; i < 4; i++) {
        const left: ClaimLeft = {};
        claims.push((await queue.claim('bulky', ['bulky'], 100, 'w', left)).map((g) => g.rec.session));
        more.push(left.more === true);
      }
      // Four inputs of 1 MB fit in 4 MiB, a fifth does not: it is the oldest left, for the next claim (whose
      // `more` says so); the 5 MB call is given alone.
      const s = (from: number, to: number) =>
        Array.from({ length: to - from }, (_, i) => `s-bulky-${from + i}`);
      assert.deepEqual(claims, [s(0, 4), s(4, 8), ['s-bulky-8'], []]);
      assert.deepEqual(more, [true, true, false, false]);
      assert.equal(answered.length, 4);
      for (const n of answered.slice(0, 2)) assert.ok(n <= CLAIM_MAX_BYTES, `a claim answered ${n} bytes`);
      assert.ok(
        answered[2]! > 5 * MB && answered[2]! < 5 * MB + 4096,
        `the large call alone: ${answered[2]}`,
      );
      assert.equal(await r.zcard('tt:{tt:bulky}:ready'), 0);
      assert.equal(await r.zcard('tt:{tt:bulky}:leased'), 9);
    } finally {
      for (let i = 0; i < 9; i++) await queue.settle('bulky', `s-bulky-${i}:tu-${i}#0`, 'cancelled');
      own.disconnect();
    }
  });

  it('calls queued before the per-tool index existed are indexed by the tenant’s first claim', async () => {
    const queue: TaskQueue = h.service.app.toolTasks.queue;
    await queue.enqueue('legacy', {
      session: 's-legacy',
      toolUseId: 'tu',
      round: 0,
      name: 'old_tool',
      input: {},
      runner: 'worker',
      maxAttempts: 3,
      timeoutMs: 600_000,
    });
    // As an older release left it: the call in `ready` only.
    await r.del('tt:{tt:legacy}:ready:old_tool', 'tt:{tt:legacy}:ready#indexed');
    const got = await queue.claim('legacy', ['old_tool'], 1, 'w');
    assert.deepEqual(
      got.map((g) => g.rec.session),
      ['s-legacy'],
    );
    assert.equal(await r.zcard('tt:{tt:legacy}:ready:old_tool'), 0);
    assert.equal(await r.zcard('tt:{tt:legacy}:ready'), 0);
  });
  it('a call queued wakes one waiting claim, not all; past TOOL_TASK_MAX_WAITING_CLAIMS a claim is refused 429', async () => {
    await h.api.req('PUT', '/v1/tools/wk', lookup);
    const queue: TaskQueue = h.service.app.toolTasks.queue;
    const claim = queue.claim.bind(queue);
    let runs = 0;
    queue.claim = async (...args: Parameters<TaskQueue['claim']>) => {
      if (args[1].includes('wk')) runs++;
      return claim(...args);
    };
    try {
      // Each long-poll claim claims, listens, claims again, then waits: 8 claims for 4 of them.
      const waiting = [0, 1, 2, 3].map((i) =>
        h.api.post('/v1/tool-tasks/claim', { tools: ['wk'], wait_ms: 4000, worker_id: `wk-${i}` }),
      );
      await until(async () => runs === 8, 10_000, 'four claims listening');
      const over = await h.api.post('/v1/tool-tasks/claim', {
        tools: ['wk'],
        wait_ms: 4000,
        worker_id: 'wk-4',
      });
      assert.equal(over.status, 429);
      assert.equal(over.body.error.code, 'quota_exceeded');
      assert.deepEqual(over.body.error.details, { quota: 'waiting_claims', limit: 4, retry_after_s: 1 });
      assert.equal(over.headers.get('retry-after'), '1');
      // The service refuses with the domain's quota error (the HTTP layer makes it the 429 and its Retry-After).
      await assert.rejects(
        h.service.app.toolTasks.claim(
          'acme',
          { tools: ['wk'], max: 1, wait_ms: 4000, worker_id: 'wk-direct' },
          new AbortController().signal,
        ),
        (err: unknown) => isQuota(err, 'waiting_claims') && (err as QuotaExceeded).retryAfterS === 1,
      );
      const now = await h.api.post('/v1/tool-tasks/claim', { tools: ['wk'], wait_ms: 0, worker_id: 'wk-5' });
      assert.equal(now.status, 200, 'a claim that does not wait is not counted');
      runs = 0;
      // A call of no live session: the woken claim takes it, finds nobody waits for it, settles it and waits on.
      await queue.enqueue('acme', {
        session: 's-nobody',
        toolUseId: 'tu-wk',
        round: 0,
        name: 'wk',
        input: {},
        runner: 'worker',
        maxAttempts: 3,
        timeoutMs: 600_000,
      });
      await until(
        async () => (await queue.record('acme', 's-nobody:tu-wk#0'))?.rec.state === 'cancelled',
        10_000,
        'the call claimed and settled',
      );
      // Every woken claim would have run its claim before the first one's script answered.
      assert.equal(runs, 1, `claims run for one call: ${runs}`);
      for (const c of await Promise.all(waiting)) assert.deepEqual(c.body.tasks, []);
    } finally {
      queue.claim = claim;
    }
  });

  it('a worker whose call timed out is told so: task_already_completed says timed_out, a duplicate result_taken', async () => {
    // 3 s: the late call is claimed well before its deadline on a loaded machine (its claim waits for it already).
    await h.api.req('PUT', '/v1/tools/late', { ...lookup, timeout_ms: 3000 });
    await h.api.req('PUT', '/v1/tools/quick', lookup);
    h.fake.enqueue(
      toolCalls([toolUse('late', { id: 1 }, 'toolu_l1'), toolUse('quick', { id: 2 }, 'toolu_q1')]),
      text('fin'),
    );
    const claim = async (tool: string) =>
      (await h.api.post('/v1/tool-tasks/claim', { tools: [tool], wait_ms: 20_000 })).body.tasks[0];
    // The claims wait before the calls are queued: each is taken as it comes.
    const claims = Promise.all([claim('late'), claim('quick')]);
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['late', 'quick'] })).body.id;
    const [late, quick] = await claims;
    assert.ok(late && quick);
    assert.equal((await h.api.post(`/v1/tool-tasks/${quick.id}/result`, { content: 'ok' })).status, 200);
    // The late call's deadline passes while its worker still holds the lease: the session gets the timeout's error.
    await h.api.waitStatus(id, 'idle', 30_000);
    const results = h.fake.requests[1]!.messages.at(-1)!.content as any[];
    const lateResult = results.find((b) => b.tool_use_id === 'toolu_l1');
    assert.match(lateResult.content, /no worker answered within 3000 ms/);
    for (const route of ['heartbeat', 'result']) {
      const r = await h.api.post(
        `/v1/tool-tasks/${late.id}/${route}`,
        route === 'result' ? { content: 'x' } : {},
      );
      assert.equal(r.status, 409, route);
      assert.equal(r.body.error.code, 'task_already_completed', route);
      const { reason, timed_out_at, timeout_ms } = r.body.error.details;
      assert.deepEqual({ reason, timeout_ms }, { reason: 'timed_out', timeout_ms: 3000 }, route);
      // After the claim (its lease's start, Redis's clock) and at most now: the deadline passed between the two.
      const at = Date.parse(timed_out_at);
      assert.ok(
        at > Date.parse(late.lease_expires_at) - late.lease_ms && at <= Date.now(),
        `${route}: ${timed_out_at}`,
      );
      assert.match(r.body.error.message, /timed out/, route);
    }
    // A result posted again for a call that had one (a retry whose answer was lost): a duplicate, not a timeout.
    const again = await h.api.post(`/v1/tool-tasks/${quick.id}/result`, { content: 'ok' });
    assert.equal(again.status, 409);
    assert.equal(again.body.error.code, 'task_already_completed');
    assert.deepEqual(again.body.error.details, { reason: 'result_taken' });
  });
});
