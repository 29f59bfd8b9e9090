import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import Fastify, { type FastifyInstance } from 'fastify';
import { startHarness, type Harness } from '../helpers/service.js';
import { startTestRedis } from '../helpers/redis.js';
import { text } from '../fake/script.js';
import app from '../../src/app.js';
import { loadConfig } from '../../src/config.js';

/**
 * Authentication is by route scope: every spelling of a /v1 path that the router maps to a handler, and every
 * request-target form, needs a key. Raw sockets, because fetch and ws normalise the paths this is about.
 */

const KEYS = 'acme:key-acme';

/** Spellings of `/v1<rest>` a router or a proxy might decode, merge, or resolve to the same route. */
function spellings(rest: string): string[] {
  const r = rest.slice(1); // without its leading '/'
  return [
    `/v1${rest}`,
    `/%761${rest}`,
    `/v%31${rest}`,
    `/%76%31${rest}`,
    `/%56%31${rest}`,
    `//v1${rest}`,
    `/v1/${rest}`,
    `/V1${rest}`,
    `/v1/.${rest}`,
    `/./v1${rest}`,
    `/v1/sessions/..${rest}`,
    `/v1/%2e${rest}`,
    `/v1%2f${r}`,
    `/v1%2F${r}`,
    `%2fv1${rest}`,
    `/v1${rest.replace('sessions', '%73essions')}`,
    `/v1${rest.replace('sessions', '%73%65%73%73%69%6f%6e%73')}`,
    `/v1${rest};x`,
    `/v1${rest}/`,
    `/v1${rest}?x=1`,
    `/v1${rest}#frag`,
    `/v1\\${r}`,
    `/v1${rest}%00`,
    `http://x/v1${rest}`,
    `http://x/%761${rest}`,
    `HTTP://x:1/v%31${rest}`,
    `http://x//v1${rest}`,
    `https://user:pw@x/v1${rest}`,
  ];
}

/** Sends one raw HTTP/1.1 request; resolves with the status code of the first response line (0: none). */
function rawStatus(port: number, head: string, body = ''): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let buf = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no answer to ${head.split('\r\n')[0]}`));
    }, 10_000);
    const done = (status: number) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(status);
    };
    socket.on('data', (d) => {
      buf += d.toString('latin1');
      const eol = buf.indexOf('\r\n');
      if (eol >= 0) done(Number(/^HTTP\/1\.[01] (\d{3})/.exec(buf.slice(0, eol))?.[1] ?? 0));
    });
    socket.on('end', () => done(0));
    socket.on('error', () => done(0));
    socket.write(head + body);
  });
}

const request = (method: string, target: string, headers: Record<string, string>, body = '') =>
  `${method} ${target} HTTP/1.1\r\nhost: 127.0.0.1\r\n` +
  Object.entries({ ...headers, ...(body ? { 'content-length': String(Buffer.byteLength(body)) } : {}) })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('') +
  '\r\n';

describe('authentication by route scope', () => {
  let h: Harness;
  let port: number;
  let id: string;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS } });
    port = Number(new URL(h.service.url).port);
    h.fake.enqueue(text('canary'));
    const created = await h.api.post('/v1/sessions', { start: false });
    assert.equal(created.status, 201);
    id = created.body.id;
    h.fake.reset();
  });
  after(async () => h.close());

  it('answers no spelling of a /v1 path without a key (REST, SSE, WebSocket, absolute-form targets)', async () => {
    const create = JSON.stringify({ input: 'spend the operator key', start: true });
    const message = JSON.stringify({ text: 'hello' });
    const cases: Array<{
      what: string;
      method: string;
      rest: string;
      headers: Record<string, string>;
      body?: string;
    }> = [
      { what: 'list', method: 'GET', rest: '/sessions', headers: {} },
      {
        what: 'create',
        method: 'POST',
        rest: '/sessions',
        headers: { 'content-type': 'application/json' },
        body: create,
      },
      { what: 'tools', method: 'GET', rest: '/tools', headers: {} },
      { what: 'read', method: 'GET', rest: `/sessions/${id}`, headers: {} },
      {
        what: 'follow-up',
        method: 'POST',
        rest: `/sessions/${id}/messages`,
        headers: { 'content-type': 'application/json' },
        body: message,
      },
      { what: 'delete', method: 'DELETE', rest: `/sessions/${id}`, headers: {} },
      { what: 'events page', method: 'GET', rest: `/sessions/${id}/events`, headers: {} },
      {
        what: 'SSE',
        method: 'GET',
        rest: `/sessions/${id}/events`,
        headers: { accept: 'text/event-stream' },
      },
      {
        what: 'WebSocket',
        method: 'GET',
        rest: `/sessions/${id}/stream`,
        headers: {
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
        },
      },
    ];
    const answered: string[] = [];
    let tried = 0;
    for (const c of cases) {
      for (const target of spellings(c.rest)) {
        for (const auth of [
          {},
          { authorization: 'Bearer wrong' },
          { 'sec-websocket-protocol': 'bearer, wrong' },
        ]) {
          const status = await rawStatus(
            port,
            request(c.method, target, { ...c.headers, ...auth }, c.body),
            c.body,
          );
          tried++;
          if (status === 101 || (status >= 200 && status < 300) || status >= 500 || status === 0)
            answered.push(`${c.what}: ${c.method} ${target} ${JSON.stringify(auth)} → ${status}`);
        }
      }
    }
    assert.deepEqual(answered, [], `${answered.length} of ${tried} requests got through or broke`);
    assert.equal(h.fake.requests.length, 0, 'the upstream was called without a key');
    // The session is untouched and no session exists but the owner's.
    const list = await h.api.get('/v1/sessions');
    assert.equal(list.status, 200);
    assert.deepEqual(
      list.body.data.map((s: { id: string }) => s.id),
      [id],
    );
    const s = await h.api.get(`/v1/sessions/${id}`);
    assert.equal(s.body.revision, 1);
    assert.equal(s.body.status, 'idle');
  });

  it('still answers the owner on the canonical spellings', async () => {
    assert.equal((await h.api.get('/v1/sessions')).status, 200);
    const r = await rawStatus(
      port,
      request('GET', `/%761/sessions/${id}`, { authorization: 'Bearer key-acme' }),
    );
    assert.equal(r, 200);
  });
});

describe('the boot check of the /v1 scope', () => {
  /** Registers the service, then `extra` (outside its authenticated scope), and readies it. */
  async function boot(extra: (fastify: FastifyInstance) => Promise<void> | void) {
    const redis = await startTestRedis();
    const fastify = Fastify({ logger: false });
    try {
      await fastify.register(app, {
        config: loadConfig({ REDIS_URL: redis.url, API_KEYS: KEYS, LOG_LEVEL: 'silent' }),
        redisUrl: redis.url,
        // Never called: no session runs here.
        anthropic: { apiKey: 'unused', baseURL: 'http://127.0.0.1:9', offline: false },
      });
      await extra(fastify);
      await fastify.ready();
      // Booted: a route and an unknown /v1 path answer 401 without a key; the unknown path 404 with one.
      const answer = async (url: string, headers: Record<string, string> = {}) => {
        const res = await fastify.inject({ method: 'GET', url, headers });
        return `${res.statusCode} ${res.json<{ error: { code: string } }>().error.code}`;
      };
      return [
        await answer('/v1/sessions'),
        await answer('/v1/nothing/here'),
        await answer('/v1/nothing/here', { authorization: 'Bearer key-acme' }),
      ];
    } finally {
      await fastify.close();
      await redis.stop();
    }
  }

  it('boots the service as app.ts registers it', async () => {
    assert.deepEqual(await boot(() => {}), ['401 unauthorized', '401 unauthorized', '404 route_not_found']);
  });

  it('stops the boot when a /v1 route is registered outside the authenticated scope', async () => {
    await assert.rejects(
      boot((fastify) => {
        fastify.get('/v1/leak', async () => 'answered without a key');
      }),
      /routes under \/v1 registered outside the authenticated scope of app\.ts: GET \/v1\/leak, HEAD \/v1\/leak$/,
    );
    // Through a plugin's prefix too, and whatever the case of the prefix (a case-insensitive router would match it).
    await assert.rejects(
      boot(async (fastify) => {
        await fastify.register(
          async (plugin: FastifyInstance) => {
            plugin.post('/sessions/:id/export', async () => 'answered without a key');
          },
          { prefix: '/V1' },
        );
      }),
      /outside the authenticated scope of app\.ts: POST \/V1\/sessions\/:id\/export$/,
    );
  });
});
