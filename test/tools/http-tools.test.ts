/**
 * HTTP tools (spec §7.1): the service POSTs each call to the tool's URL, signed per Standard Webhooks with the
 * tool's secret, and takes the 2xx JSON answer as the result; a failed try is retried with backoff, a slow body
 * is cut at the deadline, the URL is refused by the webhooks' address rules. A real local receiver verifies every
 * request with the `standardwebhooks` package.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';
import { parseExposition, value } from '../helpers/prometheus.js';
import { Redis } from 'ioredis';
import { sessionKeys } from '../../src/store/keys.js';

type Handler = (body: any, res: http.ServerResponse) => void;

/**
 * A try's heartbeat comes every third of the lease (30 s here): long enough that none falls within a test's wait
 * unless the test waits for it.
 */
const LEASE_MS = 90_000;
const ENV = {
  API_KEYS: 'acme:key-a,globex:key-b',
  WEBHOOK_ALLOW_PRIVATE: 'true',
  TOOL_TASK_LEASE_MS: String(LEASE_MS),
};

describe('http tools', { timeout: 120_000 }, () => {
  let h: Harness;
  let server: http.Server;
  let verifier: Webhook | null = null;
  const seen: Array<{ body: any; verified: boolean; webhookId: string }> = [];
  const handlers: Handler[] = [];
  /** Handlers by tool name, before the queue of `handlers`. */
  const byName = new Map<string, Handler>();
  const waiters: Array<() => void> = [];
  let url = '';

  before(async () => {
    server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        let verified: boolean;
        try {
          verifier?.verify(raw, {
            'webhook-id': String(req.headers['webhook-id']),
            'webhook-timestamp': String(req.headers['webhook-timestamp']),
            'webhook-signature': String(req.headers['webhook-signature']),
          });
          verified = true;
        } catch {
          verified = false;
        }
        const body = JSON.parse(raw);
        seen.push({ body, verified, webhookId: String(req.headers['webhook-id']) });
        for (const w of waiters.splice(0)) w();
        const handle = byName.get(body.name) ?? handlers.shift() ?? ((_b, r) => r.writeHead(500).end());
        handle(body, res);
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/tool`;
    h = await startHarness({ env: ENV });
  });
  after(async () => {
    await h?.close();
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  beforeEach(() => {
    h.fake.reset();
    seen.length = 0;
    handlers.length = 0;
    byName.clear();
  });

  const json = (res: http.ServerResponse, status: number, body: unknown) =>
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  const taskCounts = async () => {
    const samples = parseExposition(String((await h.api.get('/metrics')).body));
    const n = (event: string) => value(samples, 'trs_tool_tasks_total', { event }) ?? 0;
    return { claimed: n('claimed'), retried: n('retried'), completed: n('completed') };
  };
  const resultsSent = (i: number): any[] =>
    (h.fake.requests[i]!.messages.at(-1)!.content as any[]).filter((b: any) => b.type === 'tool_result');

  it('signs each call with the tool’s secret, retries a 500, takes the 2xx answer (its other fields ignored)', async () => {
    const put = await h.api.req('PUT', '/v1/tools/price_lookup', {
      description: 'Price of a product.',
      input_schema: { type: 'object', properties: { sku: { type: 'string' } } },
      runner: { type: 'http', url, timeout_ms: 5000 },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    assert.match(put.body.secret, /^whsec_/);
    verifier = new Webhook(put.body.secret);
    assert.equal((await h.api.get('/v1/tools/price_lookup')).body.secret, undefined, 'shown once');
    const again = await h.api.req('PUT', '/v1/tools/price_lookup', {
      description: 'Price of a product.',
      input_schema: { type: 'object', properties: { sku: { type: 'string' } } },
      runner: { type: 'http', url, timeout_ms: 5000 },
    });
    assert.equal(again.status, 200);
    assert.equal(again.body.secret, undefined, 'a replace keeps the secret');

    handlers.push(
      (_b, res) => json(res, 500, { oops: true }),
      (_b, res) => json(res, 200, { content: '42 EUR', request_id: 'req_1', meta: { took_ms: 3 } }),
    );
    h.fake.enqueue(toolCalls([toolUse('price_lookup', { sku: 'A1' }, 'toolu_p1')]), text('It costs 42 EUR.'));
    const counted = await taskCounts();
    const id = (await h.api.post('/v1/sessions', { input: 'price?', tools: ['price_lookup'] })).body.id;
    const s = await h.api.waitStatus(id, 'idle', 30_000);
    assert.equal(s.stop_reason, 'end_turn');
    assert.deepEqual(resultsSent(1), [{ type: 'tool_result', tool_use_id: 'toolu_p1', content: '42 EUR' }]);
    assert.equal(seen.length, 2);
    assert.ok(
      seen.every((x) => x.verified),
      'every request verifies with standardwebhooks',
    );
    assert.deepEqual(
      seen.map((x) => [x.body.attempt, x.body.idempotency_key, x.body.name, x.body.input.sku]),
      [
        [1, `${id}:toolu_p1`, 'price_lookup', 'A1'],
        [2, `${id}:toolu_p1`, 'price_lookup', 'A1'],
      ],
    );
    assert.notEqual(seen[0]!.body.id, seen[1]!.body.id, 'each try has its own task id');
    // Signed as webhooks are (§6.3): the webhook-id is the same on every attempt, so a receiver dedupes on it.
    assert.deepEqual(
      seen.map((x) => x.webhookId),
      [`${id}:toolu_p1#0`, `${id}:toolu_p1#0`],
    );
    const now = await taskCounts();
    assert.deepEqual(
      {
        claimed: now.claimed - counted.claimed,
        retried: now.retried - counted.retried,
        completed: now.completed - counted.completed,
      },
      { claimed: 2, retried: 1, completed: 1 },
      'the calls count in trs_tool_tasks_total as a worker’s do',
    );
    // The retry is told on the session too, as a lost lease's is: its `tool_task.retried` says why, between the two
    // tries' `tool.started` (a client saw two starts and nothing between them).
    const tries = ((await h.api.get(`/v1/sessions/${id}/events?limit=500`)).body.data as any[]).filter(
      (e) => e.type === 'tool.started' || e.type === 'tool_task.retried',
    );
    assert.deepEqual(
      tries.map((e) => [e.type, e.data.attempt]),
      [
        ['tool.started', 1],
        ['tool_task.retried', 1],
        ['tool.started', 2],
      ],
    );
    const { worker_id, ...retried } = tries[1].data;
    assert.deepEqual(retried, {
      tool_use_id: 'toolu_p1',
      name: 'price_lookup',
      attempt: 1,
      next_attempt: 2,
      reason: 'http_failed',
      error: 'HTTP 500',
    });
    assert.equal(worker_id, tries[0].data.worker_id, 'the worker whose try failed');
  });

  it('PUT honours Idempotency-Key: a retry gets the first answer, secret included, its record lost or not', async () => {
    // The secret is shown once: without the key, a PUT whose 201 was lost could only be sent again as a replace
    // (200, no secret), or DELETE + PUT, whose new secret the sessions already using the tool do not sign with.
    const body = {
      description: 'Stock of a product.',
      input_schema: { type: 'object', properties: { sku: { type: 'string' } } },
      runner: { type: 'http', url, timeout_ms: 5000 },
    };
    const headers = { 'idempotency-key': 'put-stock-1' };
    const first = await h.api.req('PUT', '/v1/tools/stock_lookup', body, headers);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    assert.match(first.body.secret, /^whsec_/);
    const again = await h.api.req('PUT', '/v1/tools/stock_lookup', body, headers);
    assert.equal(again.status, 201, JSON.stringify(again.body));
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(again.headers.get('etag'), '"1"');
    assert.deepEqual(again.body, first.body, 'the first answer, its secret included');
    const other = await h.api.req(
      'PUT',
      '/v1/tools/stock_lookup',
      { ...body, description: 'Other.' },
      headers,
    );
    assert.equal(other.status, 422);
    assert.equal(other.body.error.code, 'idempotency_key_reused');
    assert.equal((await h.api.get('/v1/tools/stock_lookup')).body.revision, 1, 'nothing replaced');

    // The first answer's record is lost, as when its request's process died between its write and its record: the
    // retry finds the tool that PUT wrote (its token in it) and answers as it did, not as a replace.
    const r = new Redis(h.redis.url);
    try {
      const records = (await r.keys('idem:{acme}:*')).filter((k) => !k.includes('~'));
      assert.ok(records.length > 0);
      await r.del(...records);
      const retried = await h.api.req('PUT', '/v1/tools/stock_lookup', body, headers);
      assert.equal(retried.status, 201, JSON.stringify(retried.body));
      assert.equal(retried.headers.get('idempotent-replayed'), 'true');
      assert.equal(retried.body.secret, first.body.secret);
      assert.equal(retried.body.revision, 1);

      // A session's copy of the tool is its definition: nothing of the request that wrote it.
      const ses = (await h.api.post('/v1/sessions', { input: 'x', tools: ['stock_lookup'], start: false }))
        .body;
      const copies = JSON.parse(String(await r.hget(sessionKeys(ses.id).meta, 'tenant_tools')));
      assert.deepEqual(Object.keys(copies), ['stock_lookup']);
      assert.equal(copies.stock_lookup.applied, undefined);
      await h.api.req('DELETE', `/v1/sessions/${ses.id}`);

      // Another PUT replaces the tool and its token: the key's request, its record gone, is then a replace too.
      const replaced = await h.api.req('PUT', '/v1/tools/stock_lookup', body);
      assert.equal(replaced.status, 200);
      assert.equal(replaced.body.secret, undefined);
      await r.del(...(await r.keys('idem:{acme}:*')).filter((k) => !k.includes('~')));
      const late = await h.api.req('PUT', '/v1/tools/stock_lookup', body, headers);
      assert.equal(late.status, 200, JSON.stringify(late.body));
      assert.equal(late.body.secret, undefined);
      assert.equal(late.headers.get('idempotent-replayed'), null);
    } finally {
      r.disconnect();
    }
  });

  it('a non-2xx is retried whatever its body: an error page past TOOL_RESULT_MAX_BYTES too', async () => {
    const put = await h.api.req('PUT', '/v1/tools/big_error', {
      description: 'Answers a large error page first.',
      input_schema: { type: 'object', properties: {} },
      runner: { type: 'http', url, timeout_ms: 5000 },
      max_attempts: 3,
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    verifier = new Webhook(put.body.secret);
    handlers.push(
      (_b, res) =>
        res.writeHead(502, { 'content-type': 'text/html' }).end('<p>bad gateway</p>'.repeat(120_000)),
      (_b, res) => json(res, 200, { content: 'fine' }),
    );
    h.fake.enqueue(toolCalls([toolUse('big_error', {}, 'toolu_big1')]), text('Fine.'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['big_error'] })).body.id;
    const s = await h.api.waitStatus(id, 'idle', 30_000);
    assert.equal(s.stop_reason, 'end_turn');
    assert.deepEqual(resultsSent(1), [{ type: 'tool_result', tool_use_id: 'toolu_big1', content: 'fine' }]);
    assert.equal(seen.length, 2);
  });

  it('a body that trickles past the deadline fails the try; after max_attempts the call is an error', async () => {
    const put = await h.api.req('PUT', '/v1/tools/slow_body', {
      description: 'Answers slowly.',
      input_schema: { type: 'object' },
      runner: { type: 'http', url, timeout_ms: 400 },
      max_attempts: 1,
    });
    verifier = new Webhook(put.body.secret);
    let trickle: NodeJS.Timeout | undefined;
    handlers.push((_b, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"content": "');
      trickle = setInterval(() => res.write('x'), 50);
      res.on('close', () => clearInterval(trickle));
    });
    h.fake.enqueue(toolCalls([toolUse('slow_body', {}, 'toolu_s1')]), text('It failed.'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['slow_body'] })).body.id;
    await h.api.waitStatus(id, 'idle', 30_000);
    clearInterval(trickle);
    const [r] = resultsSent(1);
    assert.equal(r.is_error, true);
    assert.match(r.content, /timeout after 400 ms/);
  });

  it('an answer nested past 64 levels is not taken: after max_attempts the call is an error', async () => {
    const put = await h.api.req('PUT', '/v1/tools/deep_answer', {
      description: 'Answers deep JSON.',
      input_schema: { type: 'object' },
      runner: { type: 'http', url },
      max_attempts: 1,
    });
    verifier = new Webhook(put.body.secret);
    // Valid as a result (a document block's citations take any object), 3,000 levels deep.
    const deep = '{"a":'.repeat(3000) + '1' + '}'.repeat(3000);
    byName.set('deep_answer', (_b, res) =>
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(`{"content": [{"type": "text", "text": "x", "citations": ${deep}}]}`),
    );
    h.fake.enqueue(toolCalls([toolUse('deep_answer', {}, 'toolu_deep')]), text('It failed.'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['deep_answer'] })).body.id;
    await h.api.waitStatus(id, 'idle', 30_000);
    const [r] = resultsSent(1);
    assert.equal(r.is_error, true);
    assert.match(r.content, /nested at most 64 levels/);
  });

  it('a call resumed after it failed is a call of its own: another webhook-id, the same on its attempts', async () => {
    const put = await h.api.req('PUT', '/v1/tools/resumed_http', {
      description: 'Fails once.',
      input_schema: { type: 'object' },
      runner: { type: 'http', url, timeout_ms: 5000 },
      max_attempts: 2,
    });
    verifier = new Webhook(put.body.secret);
    handlers.push(
      (_b, res) => json(res, 500, {}),
      (_b, res) => json(res, 500, {}),
      (_b, res) => json(res, 200, { content: 'fine' }),
    );
    h.fake.enqueue(toolCalls([toolUse('resumed_http', {}, 'toolu_r1')]), text('done'));
    const created = await h.api.post('/v1/sessions', {
      input: 'go',
      tools: ['resumed_http'],
      on_tool_error: 'fail',
    });
    const id = created.body.id;
    assert.equal((await h.api.waitStatus(id, 'failed', 30_000)).status, 'failed');
    const resumed = await h.api.post(`/v1/sessions/${id}/resume`);
    assert.equal(resumed.status, 202, JSON.stringify(resumed.body));
    await h.api.waitStatus(id, 'idle', 30_000);
    assert.deepEqual(
      seen.map((x) => [x.webhookId, x.body.attempt, x.verified]),
      [
        [`${id}:toolu_r1#0`, 1, true],
        [`${id}:toolu_r1#0`, 2, true],
        [`${id}:toolu_r1#1`, 1, true],
      ],
    );
  });

  it('a call whose session was cancelled is not tried again', async () => {
    const put = await h.api.req('PUT', '/v1/tools/flaky_http', {
      description: 'Fails.',
      input_schema: { type: 'object' },
      runner: { type: 'http', url, timeout_ms: 5000 },
      max_attempts: 5,
    });
    verifier = new Webhook(put.body.secret);
    // The first try answers 500 once the session is cancelled: its retry finds the session no longer waiting.
    let answer!: () => void;
    const answered = new Promise<void>((r) => (answer = r));
    handlers.push((_b, res) => void answered.then(() => json(res, 500, { oops: true })));
    handlers.push((_b, res) => json(res, 200, { content: 'too late' }));
    h.fake.enqueue(toolCalls([toolUse('flaky_http', {}, 'toolu_c1')]), text('never'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['flaky_http'] })).body.id;
    await until(async () => seen.length === 1, 20_000, 'the first try');
    assert.equal((await h.api.post(`/v1/sessions/${id}/cancel`)).status, 200);
    answer();
    // The call is settled as cancelled (when its retry is claimed, after the backoff), never sent again.
    const r = new Redis(h.redis.url);
    try {
      await until(
        async () =>
          Object.values(await r.hgetall('tt:{tt:acme}:calls')).some((v) => /"state":"cancelled"/.test(v)),
        20_000,
        'the call settled as cancelled',
      );
    } finally {
      r.disconnect();
    }
    assert.equal(seen.length, 1);
    const started = (await h.api.get(`/v1/sessions/${id}/events?limit=500`)).body.data.filter(
      (e: { type: string }) => e.type === 'tool.started',
    );
    assert.equal(started.length, 1);
    assert.deepEqual(started[0].data.input, {});
  });

  it('a call whose tool a PATCH copied anew as a worker tool ends with an error, not waiting for ever', async () => {
    // The session's copy of the tool is taken anew when a PATCH names it (spec §7.1); a call queued as an http call
    // and retried after that finds no URL to call. It used to be settled as cancelled, the session left `running`
    // for ever (no lease, no deadline left to fire).
    const tool = { description: 'Changes runner.', input_schema: { type: 'object' } };
    const put = await h.api.req('PUT', '/v1/tools/switched', { ...tool, runner: { type: 'http', url } });
    verifier = new Webhook(put.body.secret);
    let first!: (res: http.ServerResponse) => void;
    const held = new Promise<http.ServerResponse>((r) => (first = r));
    byName.set('switched', (_b, res) => first(res));
    h.fake.enqueue(toolCalls([toolUse('switched', {}, 'toolu_sw')]), text('fin'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['switched'] })).body.id;
    const res = await held;
    assert.equal(
      (await h.api.req('PUT', '/v1/tools/switched', { ...tool, runner: { type: 'worker' } })).status,
      200,
    );
    const patched = await h.api.req('PATCH', `/v1/sessions/${id}`, { tools: ['switched'] });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    // The try fails: the call is offered again, to a caller that now finds a worker tool in the session.
    json(res, 500, { oops: true });
    const s = await h.api.waitStatus(id, 'idle', 30_000);
    assert.equal(s.stop_reason, 'end_turn');
    const [result] = resultsSent(1);
    assert.equal(result.tool_use_id, 'toolu_sw');
    assert.equal(result.is_error, true);
    assert.match(result.content, /no longer an http tool/);
    assert.equal(seen.length, 1, 'not sent again');
  });

  it('an answer holding a lone surrogate is an is_error result, not a string the history cannot hold', async () => {
    const put = await h.api.req('PUT', '/v1/tools/surrogate', {
      description: 'Answers ill-formed Unicode.',
      input_schema: { type: 'object' },
      runner: { type: 'http', url },
    });
    verifier = new Webhook(put.body.secret);
    // Escaped as JSON allows (and JSON.parse takes): `\ud800` without its pair.
    byName.set('surrogate', (_b, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"content": "a\\ud800b"}'),
    );
    h.fake.enqueue(toolCalls([toolUse('surrogate', {}, 'toolu_sg')]), text('fin'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['surrogate'] })).body.id;
    const s = await h.api.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    const [result] = resultsSent(1);
    assert.equal(result.is_error, true);
    assert.match(result.content, /lone surrogate/);
    assert.ok(JSON.stringify(result.content).isWellFormed() && result.content.isWellFormed());
    assert.equal(seen.length, 1, 'an answer that cannot be taken is not asked again');
  });

  it('an error answer without content is given a text: the Messages API refuses an empty is_error result', async () => {
    const put = await h.api.req('PUT', '/v1/tools/mute', {
      description: 'Fails without a word.',
      input_schema: { type: 'object' },
      runner: { type: 'http', url },
    });
    verifier = new Webhook(put.body.secret);
    byName.set('mute', (_b, res) => json(res, 200, { content: [], is_error: true }));
    h.fake.enqueue(toolCalls([toolUse('mute', {}, 'toolu_mute')]), text('fin'));
    const id = (await h.api.post('/v1/sessions', { input: 'go', tools: ['mute'] })).body.id;
    const s = await h.api.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.deepEqual(resultsSent(1), [
      {
        type: 'tool_result',
        tool_use_id: 'toolu_mute',
        content: 'Error: the tool gave no details.',
        is_error: true,
      },
    ]);
    const events = (await h.api.get(`/v1/sessions/${id}/events`)).body.data;
    const completed = events.find((e: { type: string }) => e.type === 'tool.completed');
    assert.equal(completed.data.content, 'Error: the tool gave no details.', 'announced as the model got it');
  });

  it('a tenant whose URL hangs holds a few of the calls in flight: another tenant’s call is answered meanwhile', async () => {
    const b = h.api.as('key-b');
    const hung: http.ServerResponse[] = [];
    byName.set('stuck', (_b, res) => void hung.push(res));
    byName.set('quick', (_b, res) => json(res, 200, { content: 'quick answer' }));
    const tool = { description: 'x', input_schema: { type: 'object' }, max_attempts: 1 };
    await h.api.req('PUT', '/v1/tools/stuck', { ...tool, runner: { type: 'http', url, timeout_ms: 60_000 } });
    await b.req('PUT', '/v1/tools/quick', { ...tool, runner: { type: 'http', url, timeout_ms: 60_000 } });
    // 40 calls of acme's that never answer: more than a replica runs at once (32), and all it would run of one.
    h.fake.setHandler((req) => {
      if (JSON.stringify(req.body.messages).includes('tool_result')) return text('done');
      return JSON.stringify(req.body.tools ?? []).includes('stuck')
        ? toolCalls([toolUse('stuck', {})])
        : toolCalls([toolUse('quick', {})]);
    });
    const stuck = await Promise.all(
      Array.from(
        { length: 40 },
        async () => (await h.api.post('/v1/sessions', { input: 'go', tools: ['stuck'] })).body.id,
      ),
    );
    await until(async () => hung.length >= 8, 20_000, 'acme’s calls in flight');
    const id = (await b.post('/v1/sessions', { input: 'go', tools: ['quick'] })).body.id;
    const s = await b.waitStatus(id, 'idle', 20_000);
    assert.equal(s.stop_reason, 'end_turn');
    assert.equal(hung.length, 8, 'acme holds 8 calls at once, no more');
    h.fake.setHandler(null);
    for (const sid of stuck) await h.api.post(`/v1/sessions/${sid}/cancel`);
    for (const res of hung) res.destroy();
  });

  it('a cancel or delete on another replica aborts the try in flight at once: its connection closes, its slot is freed', async () => {
    // A try used to run on to the tool's timeout_ms after its call was cancelled (the caller's heartbeat was told
    // `cancelled` and went on), holding one of the tenant's 8 slots on the replica all along; then until the
    // caller's next heartbeat (a third of TOOL_TASK_LEASE_MS: 30 s here), as the cancel may be another replica's.
    const held: Array<{ res: http.ServerResponse; closed: Promise<number> }> = [];
    let answerNext = false;
    byName.set('hangs', (_b, res) => {
      if (answerNext) return json(res, 200, { content: 'got a slot' });
      const closed = new Promise<number>((r) => res.socket!.once('close', () => r(Date.now())));
      held.push({ res, closed });
    });
    const put = await h.api.req('PUT', '/v1/tools/hangs', {
      description: 'Never answers.',
      input_schema: { type: 'object' },
      runner: { type: 'http', url, timeout_ms: 120_000 },
      max_attempts: 1,
    });
    verifier = new Webhook(put.body.secret);
    h.fake.setHandler((req) =>
      JSON.stringify(req.body.messages).includes('tool_result')
        ? text('done')
        : toolCalls([toolUse('hangs', {})]),
    );
    let other: Harness | null = null;
    try {
      // All 8 of acme's slots on this replica held by calls whose URL never answers. No try's first heartbeat comes
      // before `beatsFrom`: each try begins after its session was created.
      const beatsFrom = Date.now() + LEASE_MS / 3;
      const hung = [];
      for (let i = 0; i < 8; i++)
        hung.push((await h.api.post('/v1/sessions', { input: 'go', tools: ['hangs'] })).body.id as string);
      await until(async () => held.length === 8, 20_000, 'the 8 calls in flight');
      // A second replica on the same Redis, started once the 8 tries run on the first: the cancels and the delete
      // go through it, so the first hears of them through Redis only.
      other = await startHarness({ redis: h.redis, fakeServer: h.fake, env: ENV });
      for (const id of hung.slice(0, 7))
        assert.equal((await other.api.post(`/v1/sessions/${id}/cancel`)).status, 200);
      assert.equal((await other.api.req('DELETE', `/v1/sessions/${hung[7]}`)).status, 200);
      // Every connection closed before any heartbeat could have stopped its try (5 s to spare).
      const window = beatsFrom - 5000 - Date.now();
      assert.ok(window > 0, `the setup took too long to tell a stop from a heartbeat (${window} ms left)`);
      const closedAt = await Promise.race([
        Promise.all(held.map((x) => x.closed)),
        new Promise<null>((r) => setTimeout(() => r(null), window).unref()),
      ]);
      assert.ok(closedAt, 'every cancelled or deleted call’s connection closed before a heartbeat');
      // With the second replica gone, the next call of the tenant runs on the first: in a slot the cancels freed.
      await other.close();
      other = null;
      answerNext = true;
      const next = (await h.api.post('/v1/sessions', { input: 'go', tools: ['hangs'] })).body.id as string;
      const s = await h.api.waitStatus(next, 'idle', 20_000);
      assert.equal(s.stop_reason, 'end_turn');
      assert.equal(held.length, 8, 'the cancelled calls were not tried again');
      // Nothing was written for the cancelled calls after their cancel.
      for (const id of hung.slice(0, 7)) {
        const types = (await h.api.get(`/v1/sessions/${id}/events?limit=500`)).body.data.map(
          (e: { type: string }) => e.type,
        );
        assert.ok(!types.includes('tool.completed'), JSON.stringify(types));
        assert.ok(!types.includes('tool_task.retried'), JSON.stringify(types));
      }
    } finally {
      h.fake.setHandler(null);
      await other?.close();
      for (const x of held) x.res.destroy();
    }
  });

  it('refuses a URL the webhooks’ address rules refuse', async () => {
    const bad = await h.api.req('PUT', '/v1/tools/meta', {
      description: 'x',
      input_schema: { type: 'object' },
      runner: { type: 'http', url: 'http://user:pw@example.com/' },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'invalid_webhook_url');
  });
});
