/**
 * A refused request writes no rate window (src/plugins/ratelimit.ts, src/quotas/lua/rate-hit-2.lua): one refused
 * before it is admitted — without a key, on an unknown path — writes nothing at all, and one refused by a limit
 * itself (the tenant's RATE_LIMIT_PER_MIN, a client token's own) neither counts in a window nor makes or extends
 * one, in the token's window or its tenant's. Concurrent requests still get exactly the window's count.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import Fastify, { type FastifyInstance, type FastifyRequest, type RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { startHarness, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import rateLimitPlugin, { limiterWindow } from '../../src/plugins/ratelimit.js';
import type { ClientTokenRecord } from '../../src/store/client-tokens.js';

const MAX = 6;
const TOKEN_MAX = 2;

describe('refused requests write no rate window', () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-acme,globex:key-globex,initech:key-initech,hooli:key-hooli',
        RATE_LIMIT_PER_MIN: String(MAX),
        CLIENT_TOKEN_RATE_LIMIT_PER_MIN: String(TOKEN_MAX),
        TENANT_MAX_INGEST_BYTES_PER_MIN: '1000000',
      },
    });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  /** The request windows (not the byte budgets, which count the bodies read): key → count. */
  async function counts(): Promise<Record<string, string>> {
    return Object.fromEntries(Object.entries(await windows()).filter(([k]) => !k.endsWith(':bytes')));
  }

  /** Every rate window: key → count. */
  async function windows(): Promise<Record<string, string>> {
    const keys = (await r.keys('rl:*')).sort();
    const values = await Promise.all(keys.map((k) => r.get(k)));
    return Object.fromEntries(keys.map((k, i) => [k, values[i]!]));
  }

  it('without a key, or on an unknown path, nothing is written; past a limit, no window counts, grows or lasts longer', async () => {
    const acme = h.api.as('key-acme');
    const body = { start: false };
    for (const api of [
      h.api.as('key-nobody'),
      h.api.as('ct_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'),
      h.api.as(''),
    ]) {
      for (const [method, path] of [
        ['POST', '/v1/sessions'],
        ['POST', '/v1/nowhere'],
        ['DELETE', '/v1/sessions/ses_AAAAAAAAAAAAAAAA'],
      ] as const)
        assert.equal((await api.req(method, path, method === 'POST' ? body : undefined)).status, 401);
    }
    assert.deepEqual(await windows(), {}, 'a request without a key wrote a window');
    // A key, but a path no route takes: refused before its body is read or anything counted.
    const nowhere = await acme.req('POST', '/v1/nowhere', { x: 'y'.repeat(500) });
    assert.equal(nowhere.status, 404);
    assert.equal(nowhere.body.error.code, 'route_not_found');
    assert.deepEqual(await windows(), {}, 'an unknown path wrote a window');

    // The tenant's window: a session and two client tokens (3), two requests of the first token (5).
    const id = (await acme.post('/v1/sessions', body)).body.id;
    const mint = async () => {
      const minted = await acme.post('/v1/client-tokens', { session_id: id, scopes: ['cancel'] });
      assert.equal(minted.status, 201, JSON.stringify(minted.body));
      return { api: h.api.as(minted.body.token), key: `rl:{acme}:ct:${minted.body.id}` };
    };
    const [first, second] = [await mint(), await mint()];
    for (let i = 0; i < TOKEN_MAX; i++) {
      const ok = await first.api.post(`/v1/sessions/${id}/cancel`);
      assert.notEqual(ok.status, 429, JSON.stringify(ok.body));
      assert.equal(ok.headers.get('x-ratelimit-limit'), String(MAX));
      assert.equal(ok.headers.get('x-ratelimit-remaining'), String(MAX - 4 - i));
    }
    assert.deepEqual(await counts(), { 'rl:{acme}': '5', [first.key]: '2' });
    // Past the token's window: refused, counted nowhere, its window as long as it was.
    const tokenTtl = await r.pttl(first.key);
    for (let i = 0; i < 3; i++) {
      const refused = await first.api.post(`/v1/sessions/${id}/cancel`);
      assert.equal(refused.status, 429);
      assert.equal(refused.body.error.details.limit, TOKEN_MAX);
    }
    assert.deepEqual(await counts(), { 'rl:{acme}': '5', [first.key]: '2' }, "the token's refusals counted");
    assert.ok((await r.pttl(first.key)) <= tokenTtl, "the token's window was extended");
    // The tenant's window full (6), then refusals of its key and of the second token (whose window is not made).
    assert.equal((await acme.post('/v1/sessions', body)).status, 201);
    const tenantTtl = await r.pttl('rl:{acme}');
    for (let i = 0; i < 3; i++) {
      const refused = await acme.post('/v1/sessions', body);
      assert.equal(refused.status, 429);
      assert.equal(refused.body.error.details.limit, MAX);
      assert.ok(Number(refused.headers.get('retry-after')) > 0);
      assert.equal(refused.headers.get('x-ratelimit-remaining'), '0');
    }
    const byTenant = await second.api.post(`/v1/sessions/${id}/cancel`);
    assert.equal(byTenant.status, 429);
    assert.equal(byTenant.body.error.details.limit, MAX, "refused by its tenant's window");
    assert.ok(Number(byTenant.headers.get('retry-after')) > 0);
    assert.deepEqual(await counts(), { 'rl:{acme}': String(MAX), [first.key]: '2' }, 'a refusal counted');
    assert.ok((await r.pttl('rl:{acme}')) <= tenantTtl, "the tenant's window was extended");
  });

  it("a client token's idempotent replays and idempotency refusals count in no window, as a tenant key's", async () => {
    // Counted where the tenant limiter counts, after the idempotency check: one request per key, whoever sends it.
    const initech = h.api.as('key-initech');
    const id = (await initech.post('/v1/sessions', { start: false })).body.id;
    const minted = await initech.post('/v1/client-tokens', { session_id: id, scopes: ['cancel'] });
    assert.equal(minted.status, 201, JSON.stringify(minted.body));
    const token = h.api.as(minted.body.token);
    const tokenKey = `rl:{initech}:ct:${minted.body.id}`;
    const tenant = async () => Number(await r.get('rl:{initech}'));
    const before = await tenant();
    const cancel = (key: string) => token.post(`/v1/sessions/${id}/cancel`, {}, { 'idempotency-key': key });
    const first = await cancel('once');
    assert.notEqual(first.status, 429, JSON.stringify(first.body));
    assert.equal(await tenant(), before + 1);
    assert.equal(await r.get(tokenKey), '1');
    for (let i = 0; i < 2; i++) {
      const replay = await cancel('once');
      assert.equal(replay.status, first.status);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    }
    // Refused by the idempotency check: a key that is no key (400).
    const badKey = await cancel('not a key');
    assert.equal(badKey.status, 400, JSON.stringify(badKey.body));
    assert.equal(
      await tenant(),
      before + 1,
      "a token's replay or idempotency refusal counted in its tenant's window",
    );
    assert.equal(await r.get(tokenKey), '1', "a token's replay or idempotency refusal counted in its window");
  });

  it("a route's own window (the tool-task routes', a child of the store): its refusals leave the count at its max", async () => {
    const hooli = h.api.as('key-hooli');
    const key = 'rl:POST/v1/tool-tasks/claim-{hooli}:tasks';
    const claim = () => hooli.post('/v1/tool-tasks/claim', { tools: ['nothing_here'] });
    const ROUTE_MAX = 10 * MAX;
    for (let i = 0; i < ROUTE_MAX; i++) {
      const ok = await claim();
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      assert.equal(ok.headers.get('x-ratelimit-limit'), String(ROUTE_MAX));
    }
    const ttl = await r.pttl(key);
    for (let i = 0; i < 3; i++) {
      const refused = await claim();
      assert.equal(refused.status, 429);
      assert.equal(refused.body.error.details.limit, ROUTE_MAX);
    }
    assert.equal(await r.get(key), String(ROUTE_MAX), "the route's refusals counted");
    assert.ok((await r.pttl(key)) <= ttl, "the route's window was extended");
    assert.equal(await r.get('rl:{hooli}'), null, "the route's requests counted in the tenant's window");
  });

  it('concurrent requests: exactly the window admitted, the counter at its max', async () => {
    const globex = h.api.as('key-globex');
    const answers = await Promise.all(
      Array.from({ length: 4 * MAX }, () => globex.post('/v1/sessions', { start: false })),
    );
    const statuses = answers.map((a) => a.status).sort();
    assert.deepEqual(statuses, [...Array(MAX).fill(201), ...Array(3 * MAX).fill(429)]);
    assert.equal(await r.get('rl:{globex}'), String(MAX));
  });
});

/**
 * A route with a rate window of its own (`config.rateLimit`; today the tool-task routes, which no client token may
 * call): a client token's request is counted in the token's window and the route's, never let past the route's. An
 * app of the rate limiter alone, its key check a stub (every request is acme's; `x-token` names a client token).
 */
describe('a client token on a route with its own window', () => {
  let redis: TestRedis;
  let client: Redis;
  let app: FastifyInstance;
  before(async () => {
    redis = await startTestRedis();
    client = new Redis(redis.url);
    app = Fastify();
    await app.register(
      fp(async (a) => void a.decorate('redis', client), {
        name: 'redis',
      }),
    );
    await app.register(
      fp(
        async (a) => {
          a.decorateRequest('tenant', '');
          a.decorateRequest('clientToken', null);
          a.addHook('onRequest', async (req) => {
            req.tenant = 'acme';
            const id = req.headers['x-token'];
            if (typeof id === 'string') req.clientToken = { id } as unknown as ClientTokenRecord;
          });
        },
        { name: 'auth' },
      ),
    );
    await app.register(rateLimitPlugin, { perMinute: 100, tokenPerMinute: 50 });
    app.post(
      '/own',
      { config: { rateLimit: { max: 2, keyGenerator: (req) => `{${req.tenant}}:own` } } },
      async () => ({}),
    );
  });
  after(async () => {
    await app?.close();
    client?.disconnect();
    await redis?.stop();
  });

  it("counts a token's request in the route's window, which refuses it past its max", async () => {
    const post = () => app.inject({ method: 'POST', url: '/own', headers: { 'x-token': 'ct1' } });
    for (let i = 0; i < 2; i++) assert.equal((await post()).statusCode, 200);
    const refused = await post();
    // Without the app's error handler (src/plugins/error-status.ts) the refusal is a 500 of code rate_limited.
    assert.equal(refused.json().code, 'rate_limited', "a token passed the route's own window");
    assert.equal(refused.headers['x-ratelimit-limit'], '2');
    assert.equal(await client.get('rl:POST/own-{acme}:own'), '2');
    assert.equal(await client.get('rl:{acme}:ct:ct1'), '2');
    assert.equal(
      await client.get('rl:{acme}'),
      null,
      "counted in the tenant's window, which the route does not use",
    );
  });
});

/**
 * A route's own window is counted with a client token's by one script (lua/rate-hit-2.lua), which a Redis Cluster
 * runs on keys of one slot: its key must hold the tenant's hash tag, as the token's (`rl:{tenant}:ct:…`) does.
 * limiterWindow refuses any other as the route is added.
 */
describe("a route's own window keeps its tenant's hash tag", () => {
  const route = (rateLimit: unknown, url = '/v1/own') =>
    ({ method: 'POST', url, config: { rateLimit }, handler: async () => ({}) }) as unknown as RouteOptions;
  const req = { tenant: 'acme' } as FastifyRequest;

  it("takes a key in the tenant's hash tag (the tool-task routes'), and the tenant's window", () => {
    const own = limiterWindow(
      route(
        { max: 2, keyGenerator: (r: FastifyRequest) => `{${r.tenant}}:tasks` },
        '/v1/tool-tasks/:id/heartbeat',
      ),
      100,
    );
    assert.equal(own?.key(req), 'rl:POST/v1/tool-tasks/:id/heartbeat-{acme}:tasks');
    assert.equal(own?.max, 2);
    assert.equal(limiterWindow(route({ max: 2 }), 100)?.key(req), 'rl:POST/v1/own-{acme}');
    assert.equal(limiterWindow(route(undefined), 100)?.key(req), 'rl:{acme}');
    assert.equal(limiterWindow(route(false), 100), null);
  });

  it('refuses a key in no hash tag, in another, or after one, an async keyGenerator, or one failing', () => {
    const hashTag = /POST \/v1\/own: a route's own rate window's key must hold its tenant's hash tag/;
    for (const keyGenerator of [
      (r: FastifyRequest) => `${r.tenant}:tasks`,
      (r: FastifyRequest) => `{tasks}:${r.tenant}`,
      (r: FastifyRequest) => `{}${r.tenant}`,
      (r: FastifyRequest) => `{${r.tenant}:tasks}`,
      () => '{acme}',
    ])
      assert.throws(() => limiterWindow(route({ max: 2, keyGenerator }), 100), hashTag, String(keyGenerator));
    // The route's URL comes first in the key: a brace in it takes the hash tag.
    assert.throws(
      () => limiterWindow(route({ max: 2 }, '/v1/{x}/own'), 100),
      /key must hold its tenant's hash tag/,
    );
    assert.throws(
      () => limiterWindow(route({ max: 2, keyGenerator: async (r: FastifyRequest) => `{${r.tenant}}` }), 100),
      /needs a synchronous keyGenerator/,
    );
    assert.throws(
      () =>
        limiterWindow(
          route({ max: 2, keyGenerator: (r: FastifyRequest) => `{${r.tenant}}:${r.headers['x-w']}` }),
          100,
        ),
      /keyGenerator fails on a tenant alone/,
    );
  });

  it('fails the app as such a route is added', async () => {
    const app = Fastify();
    const unused = new Redis({ lazyConnect: true });
    try {
      await app.register(fp(async (a) => void a.decorate('redis', unused), { name: 'redis' }));
      await app.register(fp(async (a) => void a.decorateRequest('tenant', ''), { name: 'auth' }));
      await app.register(rateLimitPlugin, { perMinute: 100, tokenPerMinute: 50 });
      assert.throws(
        () =>
          app.post(
            '/v1/own',
            { config: { rateLimit: { max: 2, keyGenerator: () => 'tasks' } } },
            async () => ({}),
          ),
        /POST \/v1\/own: a route's own rate window's key must hold its tenant's hash tag/,
      );
    } finally {
      await app.close();
      unused.disconnect();
    }
  });
});
