import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import WebSocket from 'ws';
import { Redis } from 'ioredis';
import { startHarness, Api, type Harness } from '../helpers/service.js';
import { assertSnapshotsEqual, snapshotRedis } from '../helpers/redis-snapshot.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { spawnService, type ServiceProcess as ChildService } from '../helpers/process.js';
import { text, toolCalls, toolUse } from '../fake/script.js';

const lookup = { name: 'lookup', input_schema: { type: 'object', properties: { q: { type: 'string' } } } };

describe('tenancy and auth', () => {
  let h: Harness;
  let a: Api;
  let b: Api;
  let id: string;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'a:key-a,b:key-b' } });
    a = h.api;
    b = h.api.as('key-b');
    // a's session: one finished iteration, then waiting for a client tool result (so every route has a target).
    h.fake.enqueue(
      toolCalls([
        toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_srv'),
        toolUse('lookup', { q: 'x' }, 'toolu_cli'),
      ]),
      text('never sent'),
    );
    const created = await a.post('/v1/sessions', { input: 'Mine', tools: ['calculate_sum', lookup] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    id = created.body.id;
    const s = await a.waitStatus(id, ['requires_action', 'failed', 'idle']);
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    // The run's end comes just after the commit that says `requires_action`: its lease and its tenant's run slot
    // are let go then. Waited for, so the snapshots below see only what b's requests do.
    const r = new Redis(h.redis.url);
    try {
      const deadline = Date.now() + 20_000;
      while ((await r.exists(`s:{${id}}:l`)) || (await r.zscore('q:{a}:runs', id)) !== null) {
        assert.ok(Date.now() < deadline, "a's run ended");
        await new Promise((res) => setTimeout(res, 10));
      }
    } finally {
      r.disconnect();
    }
  });
  after(async () => h?.close());

  const routes = (sid: string): Array<[string, string, unknown?]> => [
    ['GET', `/v1/sessions/${sid}`],
    ['DELETE', `/v1/sessions/${sid}`],
    ['GET', `/v1/sessions/${sid}/messages`],
    ['GET', `/v1/sessions/${sid}/iterations`],
    ['GET', `/v1/sessions/${sid}/iterations/1`],
    ['POST', `/v1/sessions/${sid}/messages`, { text: 'hi from b' }],
    ['POST', `/v1/sessions/${sid}/tool-calls/toolu_srv`, { decision: 'approve' }],
    ['PUT', `/v1/sessions/${sid}/tool-results/toolu_cli`, { content: 'from b' }],
    ['POST', `/v1/sessions/${sid}/tool-results`, { results: [{ tool_use_id: 'toolu_cli', content: 'b' }] }],
    ['POST', `/v1/sessions/${sid}/continue`, {}],
    ['PATCH', `/v1/sessions/${sid}`, { max_iterations: 3 }],
    ['POST', `/v1/sessions/${sid}/retry`, {}],
    ['POST', `/v1/sessions/${sid}/cancel`, {}],
    ['POST', `/v1/sessions/${sid}/resume`, {}],
    ['POST', `/v1/sessions/${sid}/fork`, { at_iteration: 1 }],
  ];

  it("another tenant gets 404 session_not_found on every route of a's session, and nothing changes", async () => {
    const before = await snapshotRedis(h.redis.url, h.service.app.engine);
    const seen = (await a.get(`/v1/sessions/${id}`)).body;
    for (const [method, path, body] of routes(id)) {
      for (const headers of [{}, { 'if-match': `"${seen.revision}"` }]) {
        const r = await b.req(method, path, body, headers);
        assert.equal(r.status, 404, `${method} ${path}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body?.error?.code, 'session_not_found', `${method} ${path}`);
      }
    }
    const list = await b.get('/v1/sessions');
    assert.equal(list.status, 200);
    assert.deepEqual(list.body.data, [], "b's list is empty");
    assertSnapshotsEqual(before, await snapshotRedis(h.redis.url, h.service.app.engine), "b's requests");
    assert.deepEqual((await a.get(`/v1/sessions/${id}`)).body, seen, "a's session is unchanged");
    const mine = await a.get('/v1/sessions');
    assert.deepEqual(
      mine.body.data.map((s: any) => s.id),
      [id],
    );
    assert.equal(h.fake.requests.length, 1, 'nothing was sent to the model');
  });

  it("another tenant gets 404 session_not_found on a's session's event log", async () => {
    const before = await snapshotRedis(h.redis.url, h.service.app.engine);
    for (const accept of ['application/json', 'text/event-stream']) {
      const r = await b.get(`/v1/sessions/${id}/events`, { accept });
      assert.equal(r.status, 404, JSON.stringify(r.body));
      assert.equal(r.body?.error?.code, 'session_not_found', `events (${accept}): ${JSON.stringify(r.body)}`);
    }
    assertSnapshotsEqual(
      before,
      await snapshotRedis(h.redis.url, h.service.app.engine),
      "b's event requests",
    );
  });

  it("another tenant's WebSocket stream of a's session is refused with 404 session_not_found before the upgrade", async () => {
    const refused = (headers: Record<string, string>, protocols?: string[]) =>
      new Promise<{ status: number; body: any }>((resolve, reject) => {
        const ws = new WebSocket(`${h.api.base.replace('http', 'ws')}/v1/sessions/${id}/stream`, protocols, {
          headers,
        });
        ws.on('open', () => {
          ws.terminate();
          reject(new Error('the socket opened'));
        });
        ws.on('error', () => {});
        ws.on('unexpected-response', (_req, res) => {
          let raw = '';
          res.on('data', (c: Buffer) => (raw += c.toString('utf8')));
          res.on('end', () => {
            ws.terminate();
            let body: any = raw;
            try {
              body = JSON.parse(raw);
            } catch {
              /* not JSON */
            }
            resolve({ status: res.statusCode ?? 0, body });
          });
        });
      });
    const byHeader = await refused({ authorization: 'Bearer key-b' });
    assert.equal(byHeader.status, 404, JSON.stringify(byHeader.body));
    assert.equal(byHeader.body?.error?.code, 'session_not_found');
    const bySubprotocol = await refused({}, ['bearer', 'key-b']);
    assert.equal(bySubprotocol.status, 404, JSON.stringify(bySubprotocol.body));
    assert.equal(bySubprotocol.body?.error?.code, 'session_not_found');
    const anonymous = await refused({});
    assert.equal(anonymous.status, 401, JSON.stringify(anonymous.body));
  });

  it('a missing, wrong or malformed bearer gets 401 unauthorized, and nothing is written', async () => {
    const before = await snapshotRedis(h.redis.url, h.service.app.engine);
    const anon = new Api(h.api.base);
    const cases: Array<[string, Record<string, string>]> = [
      ['no header', {}],
      ['wrong key', { authorization: 'Bearer key-c' }],
      ['empty bearer', { authorization: 'Bearer ' }],
      ['basic scheme', { authorization: `Basic ${Buffer.from('a:key-a').toString('base64')}` }],
      ['key without scheme', { authorization: 'key-a' }],
      ['x-api-key only', { 'x-api-key': 'key-a' }],
    ];
    const targets: Array<[string, string, unknown?]> = [
      ['GET', '/v1/sessions'],
      ['POST', '/v1/sessions', { input: 'sneaky' }],
      ['GET', '/v1/tools'],
      ...routes(id),
    ];
    for (const [name, headers] of cases) {
      for (const [method, path, body] of targets) {
        const r = await anon.req(method, path, body, headers);
        assert.equal(r.status, 401, `${name} ${method} ${path}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body?.error?.code, 'unauthorized', `${name} ${method} ${path}`);
        assert.match(r.headers.get('www-authenticate') ?? '', /^Bearer/i);
      }
    }
    // a tenant's own key works
    assert.equal((await a.get(`/v1/sessions/${id}`)).status, 200);
    assert.equal((await anon.get('/healthz')).status, 200, '/healthz needs no key');
    assertSnapshotsEqual(
      before,
      await snapshotRedis(h.redis.url, h.service.app.engine),
      'unauthorized requests',
    );
  });

  it('tenant b can use its own sessions; a cannot see them', async () => {
    h.fake.enqueue(text('hello b'));
    const created = await b.post('/v1/sessions', { input: 'Theirs' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const bid = created.body.id;
    const done = await b.waitStatus(bid, ['idle', 'failed']);
    assert.equal(done.status, 'idle');
    for (const [method, path, body] of routes(bid)) {
      if (method === 'DELETE') continue;
      const r = await a.req(method, path, body);
      assert.equal(r.status, 404, `${method} ${path}`);
      assert.equal(r.body?.error?.code, 'session_not_found', `${method} ${path}`);
    }
    assert.deepEqual(
      (await a.get('/v1/sessions')).body.data.map((s: any) => s.id),
      [id],
    );
    assert.equal((await b.req('DELETE', `/v1/sessions/${bid}`)).status, 200);
    assert.equal((await b.get(`/v1/sessions/${bid}`)).status, 404);
  });
});

/**
 * A WebSocket upgrade refused with 401 must not leave its socket open: Node's HTTP server no longer tracks an upgrade
 * socket, so a socket nobody ends stays open for as long as the client likes and holds up a graceful shutdown.
 * Run in a child process, so a leaked socket cannot hang this test file's own shutdown.
 */
describe('refused WebSocket upgrades', () => {
  let redis: TestRedis;
  let child: ChildService;
  before(async () => {
    redis = await startTestRedis({ appendonly: false });
    child = await spawnService({
      REDIS_URL: redis.url,
      ANTHROPIC_API_KEY: 'test-key',
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:9',
      API_KEYS: 'a:key-a,b:key-b',
    });
  });
  after(async () => {
    await child?.kill();
    await redis?.stop();
  });

  /** Sends a raw upgrade request; resolves with the status line and whether the server ended the socket in time. */
  const upgrade = (path: string, headers: string, withinMs: number) =>
    new Promise<{ statusLine: string; ended: boolean }>((resolve) => {
      const { port } = new URL(child.url);
      const sock = net.connect(Number(port), '127.0.0.1');
      let data = '';
      const timer = setTimeout(() => {
        sock.destroy();
        resolve({ statusLine: data.split('\r\n')[0]!, ended: false });
      }, withinMs);
      sock.on('data', (c: Buffer) => (data += c.toString('latin1')));
      sock.on('end', () => {
        clearTimeout(timer);
        sock.destroy();
        resolve({ statusLine: data.split('\r\n')[0]!, ended: true });
      });
      sock.on('error', () => {});
      sock.write(
        `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n${headers}\r\n`,
      );
    });

  for (const path of [
    '/v1/sessions/ses_AAAAAAAAAAAAAAAA/stream',
    '/v1/sessions/ses_AAAAAAAAAAAAAAAA/events',
    '/v1/sessions',
    '/v1/no-such-route',
  ]) {
    it(`an unauthenticated upgrade of ${path} gets 401 and its socket is closed by the server`, async () => {
      const r = await upgrade(path, '', 3000);
      assert.match(r.statusLine, /^HTTP\/1\.1 401/);
      assert.ok(r.ended, `the server kept the refused upgrade socket open (${r.statusLine})`);
    });
  }

  it("another tenant's upgrade of a stream gets 404 and its socket is closed by the server", async () => {
    const r = await upgrade(
      '/v1/sessions/ses_AAAAAAAAAAAAAAAA/stream',
      'Authorization: Bearer key-b\r\n',
      3000,
    );
    assert.match(r.statusLine, /^HTTP\/1\.1 404/);
    assert.ok(r.ended);
  });
});
