/**
 * The typed client's methods for the routes besides a session's own: history replacement, tenant tools and their
 * tasks, MCP servers, webhooks, memory files, client tokens, schedules and usage, against a real service. Each
 * answers the body, and a refusal throws the ApiError subclass with the contract's code. A path parameter that is a
 * dot segment (`..`), and a memory path holding one, are refused before anything is sent: the URL would resolve it
 * and the request reach another route (a memory path `../sessions/ses_X` deleted the session through the Python
 * client).
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  ApiError,
  ConflictError,
  NotFoundError,
  RevisionMismatchError,
  SessionsClient,
  verifyWebhook,
  type PutToolBody,
} from '../../packages/client/src/index.js';
import { text, toolCall } from '../fake/script.js';
import { clientFor, startHarness, type Harness } from '../helpers/service.js';

/** Asserts `p` rejects with `Class`, status `status` and the contract's `code`. */
async function refused<E extends ApiError>(
  p: Promise<unknown>,
  Class: new (...args: never[]) => E,
  status: number,
  code: string,
): Promise<E> {
  let caught: unknown;
  await assert.rejects(p, (err: unknown) => {
    caught = err;
    return true;
  });
  assert.ok(caught instanceof Class, `${Class.name} expected: ${String(caught)}`);
  assert.equal(caught.status, status, caught.message);
  assert.equal(caught.code, code, caught.message);
  return caught;
}

/** A client whose every request is recorded (method and URL as sent) before it goes out. */
function recordingClient(baseUrl: string, apiKey: string) {
  const sent: string[] = [];
  const client = new SessionsClient({
    baseUrl,
    apiKey,
    fetch: (req) => {
      sent.push(`${req.method} ${new URL(req.url).pathname}`);
      return fetch(req);
    },
  });
  return { client, sent };
}

/** A loopback HTTP server keeping each request's raw body and headers; answers 204. */
async function receiver() {
  const got: Array<{ body: string; headers: http.IncomingHttpHeaders }> = [];
  let arrived: (() => void) | undefined;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ body: Buffer.concat(chunks).toString('utf8'), headers: req.headers });
      arrived?.();
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    got,
    /** Resolves once a request has come (at once if one has). */
    first: () =>
      got.length > 0 ? Promise.resolve() : new Promise<void>((resolve) => (arrived = () => resolve())),
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

const WORKER_TOOL = {
  description: 'Looks up an order.',
  input_schema: { type: 'object', properties: { order: { type: 'integer' } }, required: ['order'] },
  runner: { type: 'worker' },
} satisfies PutToolBody;

describe('the typed client: routes besides the session', () => {
  let h: Harness;
  let client: SessionsClient;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a,globex:key-b', WEBHOOK_ALLOW_PRIVATE: 'true' } });
    client = h.client;
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('replaceMessages: a stale ifMatch is a RevisionMismatchError; the current one replaces the history', async () => {
    const s = await client.createSession({ input: 'Hello', start: false });
    const stale = await refused(
      client.replaceMessages(s.id, [{ role: 'user', content: 'Hi' }], { ifMatch: s.revision + 1 }),
      RevisionMismatchError,
      412,
      'revision_mismatch',
    );
    assert.equal(stale.revision, s.revision);
    const replaced = await client.replaceMessages(s.id, [{ role: 'user', content: 'Hi' }], {
      ifMatch: s.revision,
    });
    assert.equal(replaced.object, 'session');
    assert.equal(replaced.status, 'idle');
    assert.ok(replaced.revision > s.revision);
    const history = (await client.listMessages(s.id)).data;
    assert.deepEqual(
      history.map((m) => [m.role, m.content]),
      [['user', [{ type: 'text', text: 'Hi' }]]],
    );
    await refused(
      client.replaceMessages('ses_doesnotexist0000', [{ role: 'user', content: 'Hi' }]),
      NotFoundError,
      404,
      'session_not_found',
    );
  });

  it('tenant tools: put, get, list and delete, with If-Match; an unknown name is a 404 tool_not_found', async () => {
    const made = await client.putTool('ts_lookup_order', WORKER_TOOL);
    assert.equal(made.name, 'ts_lookup_order');
    assert.deepEqual(made.runner, { type: 'worker' });
    await refused(
      client.putTool('ts_lookup_order', WORKER_TOOL, { ifMatch: made.revision + 3 }),
      RevisionMismatchError,
      412,
      'revision_mismatch',
    );
    const replaced = await client.putTool(
      'ts_lookup_order',
      { ...WORKER_TOOL, timeout_ms: 5000 },
      { ifMatch: made.revision },
    );
    assert.equal(replaced.timeout_ms, 5000);
    const got = await client.getTool('ts_lookup_order');
    assert.ok('runner' in got && got.runner.type === 'worker', JSON.stringify(got));
    assert.equal((await client.getTool('get_weather')).name, 'get_weather', 'a server tool by its name');
    const listed = await client.listTools();
    assert.ok(listed.data.some((t) => t.name === 'ts_lookup_order'));
    await refused(client.getTool('ts_no_such_tool'), NotFoundError, 404, 'tool_not_found');
    // Another tenant sees none of it.
    await refused(
      clientFor(h.service.url, 'key-b').getTool('ts_lookup_order'),
      NotFoundError,
      404,
      'tool_not_found',
    );
    await refused(
      client.deleteTool('ts_lookup_order', { ifMatch: replaced.revision + 1 }),
      RevisionMismatchError,
      412,
      'revision_mismatch',
    );
    assert.deepEqual(await client.deleteTool('ts_lookup_order', { ifMatch: replaced.revision }), {
      name: 'ts_lookup_order',
      deleted: true,
    });
    await refused(client.deleteTool('ts_lookup_order'), NotFoundError, 404, 'tool_not_found');
  });

  it('putTool: an answer lost on the way is retried with its Idempotency-Key, so a new http tool’s secret comes back', async () => {
    // The first answer reaches the service's side and is lost before the client reads it (a reset connection): the
    // client's retry of the PUT gets that answer again, not a replace's 200 without the secret, shown once.
    const keys: Array<string | null> = [];
    let lose = true;
    const lossy = new SessionsClient({
      baseUrl: h.service.url,
      apiKey: 'key-a',
      baseDelayMs: 1,
      fetch: async (req) => {
        keys.push(req.headers.get('idempotency-key'));
        const res = await globalThis.fetch(req);
        if (req.method !== 'PUT' || !lose) return res;
        lose = false;
        await res.arrayBuffer();
        throw new TypeError('fetch failed');
      },
    });
    const made = await lossy.putTool('ts_http_price', {
      description: 'Price of a product.',
      input_schema: { type: 'object', properties: {} },
      runner: { type: 'http', url: 'http://127.0.0.1:9/price' },
    });
    assert.equal(keys.length, 2);
    assert.ok(keys[0] && keys[0] === keys[1], 'one Idempotency-Key for both attempts');
    assert.match(String(made.secret), /^whsec_/, 'the secret the first attempt made');
    assert.equal(made.revision, 1, 'made once');
    await client.deleteTool('ts_http_price');
  });

  it('tool tasks: claim, heartbeat and submit a result (an Idempotency-Key answers as the first); a late one is a ConflictError', async () => {
    await client.putTool('ts_order_status', WORKER_TOOL);
    h.fake.enqueue(toolCall('ts_order_status', { order: 7 }, { id: 'toolu_ts1' }), text('Order 7 shipped.'));
    const s = await client.createSession({ input: 'Where is order 7?', tools: ['ts_order_status'] });
    let tasks: Awaited<ReturnType<SessionsClient['claimToolTasks']>>['tasks'] = [];
    const deadline = Date.now() + 30_000;
    while (tasks.length === 0 && Date.now() < deadline) {
      ({ tasks } = await client.claimToolTasks({
        tools: ['ts_order_status'],
        max: 5,
        wait_ms: 5000,
        worker_id: 'ts-worker',
      }));
    }
    assert.deepEqual(
      tasks.map((t) => [t.session_id, t.tool_use_id, t.input]),
      [[s.id, 'toolu_ts1', { order: 7 }]],
    );
    const task = tasks[0]!;
    const lease = await client.heartbeatToolTask(task.id);
    assert.ok(lease.lease_ms > 0 && typeof lease.lease_expires_at === 'string', JSON.stringify(lease));
    const key = `ts-result-${task.id}`;
    const accepted = await client.submitToolTaskResult(
      task.id,
      { content: 'shipped' },
      { idempotencyKey: key },
    );
    assert.deepEqual(accepted, { id: task.id, accepted: true });
    assert.deepEqual(
      await client.submitToolTaskResult(task.id, { content: 'shipped' }, { idempotencyKey: key }),
      accepted,
      'the same key answers as the first',
    );
    await refused(
      client.submitToolTaskResult(task.id, { content: 'shipped' }),
      ConflictError,
      409,
      'task_already_completed',
    );
    await refused(client.heartbeatToolTask('tt_doesnotexist0000'), NotFoundError, 404, 'task_not_found');
    const done = await client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 30_000 });
    assert.equal(done.status, 'idle');
    // A claim waiting for calls ends when its signal aborts, long before its wait_ms.
    const stop = new AbortController();
    const started = Date.now();
    setTimeout(() => stop.abort(), 200);
    await assert.rejects(
      client.claimToolTasks({ tools: ['ts_order_status'], wait_ms: 20_000 }, { signal: stop.signal }),
      (err: unknown) => err instanceof Error && err.name === 'AbortError',
    );
    assert.ok(Date.now() - started < 10_000, 'the claim was given up when its signal aborted');
    await client.deleteTool('ts_order_status');
  });

  it('MCP servers: put, get (headers redacted), list and delete, with If-Match', async () => {
    const server = await client.putMcpServer('ts_crm', {
      url: 'http://127.0.0.1:9/mcp',
      headers: { 'x-api-key': 's3cret' },
    });
    assert.equal(server.name, 'ts_crm');
    const got = await client.getMcpServer('ts_crm');
    assert.deepEqual(got.headers, { 'x-api-key': '[redacted]' });
    assert.ok((await client.listMcpServers()).data.some((m) => m.name === 'ts_crm'));
    await refused(
      client.putMcpServer('ts_crm', { url: 'http://127.0.0.1:9/other' }, { ifMatch: server.revision + 1 }),
      RevisionMismatchError,
      412,
      'revision_mismatch',
    );
    await refused(
      client.deleteMcpServer('ts_crm', { ifMatch: server.revision + 1 }),
      RevisionMismatchError,
      412,
      'revision_mismatch',
    );
    const deleted = await client.deleteMcpServer('ts_crm', { ifMatch: server.revision });
    assert.equal(deleted.deleted, true);
    await refused(client.getMcpServer('ts_crm'), NotFoundError, 404, 'mcp_server_not_found');
  });

  it('webhooks: create (its secret verifies a test delivery), get, list, update, deliveries, delete', async () => {
    const rx = await receiver();
    try {
      const hook = await client.createWebhook({ url: rx.url }, { idempotencyKey: 'ts-wh-1' });
      assert.match(hook.secret, /^whsec_/);
      assert.equal(
        (await client.createWebhook({ url: rx.url }, { idempotencyKey: 'ts-wh-1' })).id,
        hook.id,
        'the same Idempotency-Key answers as the first',
      );
      const got = await client.getWebhook(hook.id);
      assert.equal(got.url, rx.url);
      assert.equal('secret' in got, false, 'the secret is shown at the create only');
      assert.ok((await client.listWebhooks()).data.some((w) => w.id === hook.id));
      await refused(
        client.updateWebhook(hook.id, { description: 'ts' }, { ifMatch: hook.revision + 1 }),
        RevisionMismatchError,
        412,
        'revision_mismatch',
      );
      const updated = await client.updateWebhook(hook.id, { description: 'ts' }, { ifMatch: hook.revision });
      assert.equal(updated.description, 'ts');
      const test = await client.testWebhook(hook.id);
      assert.equal(test.type, 'webhook.test');
      await rx.first();
      const delivery = rx.got[0]!;
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(delivery.headers)) if (typeof v === 'string') headers[k] = v;
      assert.equal(verifyWebhook(hook.secret, delivery.body, headers).type, 'webhook.test');
      const deliveries = await client.listWebhookDeliveries(hook.id, { limit: 5 });
      assert.ok(Array.isArray(deliveries.data));
      // Another tenant's client cannot reach it.
      await refused(
        clientFor(h.service.url, 'key-b').getWebhook(hook.id),
        NotFoundError,
        404,
        'webhook_not_found',
      );
      await refused(
        client.deleteWebhook(hook.id, { ifMatch: updated.revision + 1 }),
        RevisionMismatchError,
        412,
        'revision_mismatch',
      );
      assert.equal((await client.deleteWebhook(hook.id, { ifMatch: updated.revision })).deleted, true);
      await refused(client.getWebhook(hook.id), NotFoundError, 404, 'webhook_not_found');
      await refused(client.testWebhook(hook.id), NotFoundError, 404, 'webhook_not_found');
    } finally {
      await rx.close();
    }
  });

  it('memory: list, get and delete a file by its path, sent as one URL segment', async () => {
    h.fake.enqueue(
      toolCall('memory', {
        command: 'create',
        path: '/memories/notes/today.md',
        file_text: 'colour: blue\n',
      }),
      text('Saved.'),
    );
    const s = await client.createSession({ input: 'Remember.', tools: ['memory'] });
    assert.equal((await client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 30_000 })).status, 'idle');
    const list = await client.listMemory();
    assert.deepEqual(list.data, [{ path: 'notes/today.md', size_bytes: 13 }]);
    assert.equal(list.total_bytes, 13);
    const { client: recorded, sent } = recordingClient(h.service.url, 'key-a');
    assert.deepEqual(await recorded.getMemoryFile('notes/today.md'), {
      path: 'notes/today.md',
      content: 'colour: blue\n',
      size_bytes: 13,
    });
    assert.equal(
      (await recorded.getMemoryFile('/notes/today.md')).path,
      'notes/today.md',
      'a leading / is dropped',
    );
    assert.deepEqual(sent, ['GET /v1/memory/notes%2Ftoday.md', 'GET /v1/memory/notes%2Ftoday.md']);
    await refused(client.getMemoryFile('notes/none.md'), NotFoundError, 404, 'file_not_found');
    await refused(
      clientFor(h.service.url, 'key-b').getMemoryFile('notes/today.md'),
      NotFoundError,
      404,
      'file_not_found',
    );
    assert.deepEqual(await client.deleteMemoryFile('notes/today.md'), {
      path: 'notes/today.md',
      deleted: true,
    });
    await refused(client.deleteMemoryFile('notes/today.md'), NotFoundError, 404, 'file_not_found');
    assert.deepEqual((await client.listMemory()).data, []);
  });

  it('a memory path with a . or .. segment, or a path parameter that is one, is refused before anything is sent', async () => {
    const s = await client.createSession({ input: 'Keep me.', start: false });
    const { client: recorded, sent } = recordingClient(h.service.url, 'key-a');
    for (const path of [
      `../sessions/${s.id}`,
      `notes/../../sessions/${s.id}`,
      '..',
      '.',
      './notes.md',
      'notes/./today.md',
      '/../x.md',
    ]) {
      for (const call of [() => recorded.deleteMemoryFile(path), () => recorded.getMemoryFile(path)]) {
        await assert.rejects(call(), (err: unknown) => {
          assert.ok(err instanceof TypeError, `${path}: ${String(err)}`);
          assert.match(err.message, /"\." or "\.\." segment/);
          return true;
        });
      }
    }
    // Any other path parameter: the URL would resolve `..` (DELETE /v1/tools/.. is DELETE /v1/).
    const dots: Array<[string, () => Promise<unknown>]> = [
      ['deleteTool', () => recorded.deleteTool('..')],
      ['getTool', () => recorded.getTool('.')],
      ['deleteWebhook', () => recorded.deleteWebhook('..')],
      ['testWebhook', () => recorded.testWebhook('..')],
      ['deleteSchedule', () => recorded.deleteSchedule('..')],
      ['deleteMcpServer', () => recorded.deleteMcpServer('..')],
      ['deleteClientToken', () => recorded.deleteClientToken('..')],
      ['submitToolTaskResult', () => recorded.submitToolTaskResult('..', { content: 'x' })],
      ['replaceMessages', () => recorded.replaceMessages('..', [{ role: 'user', content: 'x' }])],
      ['deleteSession', () => recorded.deleteSession('..')],
      ['client.api', () => recorded.api.DELETE('/v1/sessions/{id}', { params: { path: { id: '..' } } })],
    ];
    for (const [name, call] of dots) {
      await assert.rejects(call(), (err: unknown) => err instanceof TypeError, name);
    }
    assert.deepEqual(sent, [], 'no request was sent');
    assert.equal((await client.getSession(s.id)).id, s.id, 'the session is still there');
    // A `%2e%2e` is only text: escaped, it names a file the service refuses.
    await refused(recorded.getMemoryFile('%2e%2e'), ApiError, 400, 'invalid_memory_path');
    assert.deepEqual(sent, ['GET /v1/memory/%252e%252e']);
  });

  it('client tokens: create (an Idempotency-Key answers as the first), use, delete', async () => {
    const s = await client.createSession({ input: 'Browse.', start: false });
    const body = { session_id: s.id, scopes: ['read' as const], ttl_s: 60, subject: 'ts' };
    const token = await client.createClientToken(body, { idempotencyKey: 'ts-ct-1' });
    assert.match(token.token, /^ct_/);
    assert.equal((await client.createClientToken(body, { idempotencyKey: 'ts-ct-1' })).id, token.id);
    const browser = clientFor(h.service.url, token.token);
    assert.equal((await browser.getSession(s.id)).id, s.id);
    assert.deepEqual(await client.deleteClientToken(token.id), {
      id: token.id,
      object: 'client_token',
      deleted: true,
    });
    await refused(browser.getSession(s.id), ApiError, 401, 'unauthorized');
    await refused(client.deleteClientToken(token.id), NotFoundError, 404, 'client_token_not_found');
    await refused(
      client.createClientToken({ session_id: 'ses_doesnotexist0000', scopes: ['read'] }),
      NotFoundError,
      404,
      'session_not_found',
    );
  });

  it('schedules: create, list, get, update, runs, events, delete', async () => {
    const body = { cron: '0 3 * * *', session: { input: 'Nightly report.' } };
    const schedule = await client.createSchedule(body, { idempotencyKey: 'ts-sch-1' });
    assert.equal(schedule.cron, '0 3 * * *');
    assert.equal((await client.createSchedule(body, { idempotencyKey: 'ts-sch-1' })).id, schedule.id);
    const page = await client.listSchedules({ limit: 100 });
    assert.ok(page.data.some((x) => x.id === schedule.id));
    assert.equal((await client.getSchedule(schedule.id)).paused, false);
    await refused(
      client.updateSchedule(schedule.id, { paused: true }, { ifMatch: schedule.revision + 1 }),
      RevisionMismatchError,
      412,
      'revision_mismatch',
    );
    const paused = await client.updateSchedule(schedule.id, { paused: true }, { ifMatch: schedule.revision });
    assert.equal(paused.paused, true);
    assert.equal((await client.getSchedule(schedule.id)).paused, true);
    assert.deepEqual((await client.listScheduleRuns(schedule.id)).data, []);
    const events = (await client.listScheduleEvents(schedule.id)).data.map((e) => e.type);
    assert.ok(events.includes('schedule.updated'), events.join(', '));
    await refused(
      client.deleteSchedule(schedule.id, { ifMatch: paused.revision + 1 }),
      RevisionMismatchError,
      412,
      'revision_mismatch',
    );
    assert.equal((await client.deleteSchedule(schedule.id, { ifMatch: paused.revision })).deleted, true);
    await refused(client.getSchedule(schedule.id), NotFoundError, 404, 'schedule_not_found');
    await refused(client.listScheduleRuns(schedule.id), NotFoundError, 404, 'schedule_not_found');
  });

  it('usage: per UTC day, from..to', async () => {
    const today = await client.getUsage();
    assert.equal(today.object, 'usage');
    assert.equal(today.from, today.to);
    const span = await client.getUsage({ from: '2024-01-01', to: '2024-01-03' });
    assert.deepEqual([span.from, span.to], ['2024-01-01', '2024-01-03']);
    await refused(
      client.getUsage({ from: '2024-01-03', to: '2024-01-01' }),
      ApiError,
      400,
      'invalid_request',
    );
  });
});
