import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { once } from 'node:events';
import net from 'node:net';
import { chromium } from 'playwright-core';
import { startHarness, type Harness } from '../helpers/service.js';
import { startService, type Service } from '../../src/boot.js';
import { connectWs, UpgradeRefused, type WsClient } from '../fixtures/event-clients.js';
import { loadConfig, streamsQuota } from '../../src/config.js';
import { Api } from '../helpers/service.js';
import { Redis } from 'ioredis';
import { untilKeyspace } from '../helpers/keyspace-wait.js';

const KEYS = 'acme:key-acme,globex:key-globex';
const CHROMIUM = '/usr/bin/chromium';

describe('tenant quotas and rate limit across replicas, security headers', () => {
  let h: Harness;
  let second: Service;
  const env = {
    API_KEYS: KEYS,
    RATE_LIMIT_PER_MIN: '6',
    TENANT_MAX_SESSIONS: '3',
    TENANT_MAX_WEBSOCKETS: '2',
  };
  before(async () => {
    h = await startHarness({ env });
    // A second replica on the same Redis and upstream.
    second = await startService({
      PORT: '0',
      HOST: '127.0.0.1',
      REDIS_URL: h.redis.url,
      REDIS_KEY_PREFIX: 'none',
      ANTHROPIC_API_KEY: 'test-key',
      ANTHROPIC_BASE_URL: h.fake.url,
      LOG_LEVEL: 'silent',
      ...env,
    });
  });
  after(async () => {
    await second?.close();
    await h?.close();
  });

  it('limits by default', () => {
    const config = loadConfig({});
    assert.ok(config.RATE_LIMIT_PER_MIN > 0);
    assert.ok(config.TENANT_MAX_SESSIONS > 0);
    assert.ok(streamsQuota(config).limit > 0);
  });

  it('TENANT_MAX_SESSIONS and RATE_LIMIT_PER_MIN hold across replicas; other tenants are not affected', async () => {
    const a1 = h.api.as('key-acme');
    const a2 = new Api(second.url, 'key-acme');
    const statuses: number[] = [];
    const ids: string[] = [];
    for (const api of [a1, a2, a1]) {
      const r = await api.post('/v1/sessions', { start: false });
      statuses.push(r.status);
      ids.push(r.body.id);
    }
    assert.deepEqual(statuses, [201, 201, 201]);
    for (const api of [a1, a2]) {
      const over = await api.post('/v1/sessions', { start: false });
      assert.equal(over.status, 429);
      assert.equal(over.body.error.code, 'quota_exceeded');
      assert.deepEqual(over.body.error.details, { quota: 'TENANT_MAX_SESSIONS', limit: 3 });
    }
    const fork = await a2.post(`/v1/sessions/${ids[0]}/fork`, { at_iteration: 0 });
    assert.equal(fork.status, 429);
    assert.equal(fork.body.error.details.quota, 'TENANT_MAX_SESSIONS');
    // 6 mutating requests so far (3 created, 3 refused): the 7th on either replica is over the rate.
    const limited = await a1.req('DELETE', `/v1/sessions/${ids[0]}`);
    assert.equal(limited.status, 429);
    assert.equal(limited.body.error.code, 'rate_limited');
    assert.ok(Number(limited.headers.get('retry-after')) > 0);
    assert.equal((await a2.req('DELETE', `/v1/sessions/${ids[0]}`)).status, 429);
    // Reads are not limited; the other tenant is not affected.
    assert.equal((await a2.get('/v1/sessions')).status, 200);
    const g = await h.api.as('key-globex').post('/v1/sessions', { start: false });
    assert.equal(g.status, 201);
  });

  it('TENANT_MAX_WEBSOCKETS holds across replicas and frees a slot when a socket closes', async () => {
    const g = h.api.as('key-globex');
    const id = (await g.get('/v1/sessions')).body.data[0].id as string;
    const open: WsClient[] = [];
    try {
      open.push(await connectWs(h.service.url, id, { token: 'key-globex' }));
      open.push(await connectWs(second.url, id, { token: 'key-globex' }));
      for (const base of [h.service.url, second.url]) {
        await assert.rejects(connectWs(base, id, { token: 'key-globex' }), (err: unknown) => {
          assert.ok(err instanceof UpgradeRefused, String(err));
          assert.equal(err.status, 429);
          assert.equal(err.body.error.code, 'quota_exceeded');
          // The name the operator set (the contract's, §6.4).
          assert.equal(err.body.error.details.quota, 'TENANT_MAX_WEBSOCKETS');
          return true;
        });
      }
      const first = open.shift()!;
      first.close();
      await first.closed;
      // The slot is given back when the server sees the socket close: retry until it has.
      let again: WsClient | undefined;
      for (let i = 0; i < 100 && !again; i++) {
        again = await connectWs(second.url, id, { token: 'key-globex' }).catch((err: unknown) => {
          if (!(err instanceof UpgradeRefused) || err.status !== 429) throw err;
          return new Promise<undefined>((resolve) => setImmediate(() => resolve(undefined)));
        });
      }
      assert.ok(again, 'the closed socket never gave its slot back');
      open.push(again);
    } finally {
      for (const c of open) c.close();
      await Promise.all(open.map((c) => c.closed));
    }
  });

  it('an event stream whose client left while its slot was taken gives the slot back', async () => {
    const g = h.api.as('key-globex');
    const id = ((await g.get('/v1/sessions')).body.data[0]?.id ??
      (await g.post('/v1/sessions', { start: false })).body.id) as string;
    const probe = new Redis(h.redis.url);
    const server = h.service.app.server;
    const port = new URL(h.service.url).port;
    try {
      // One of the tenant's two slots would be lost to a client that is gone.
      // Writes wait in Redis: the request's slot is asked for, and the client leaves before it is granted.
      await probe.client('PAUSE', 20_000, 'WRITE');
      const raw = net.connect(Number(port), '127.0.0.1');
      raw.on('error', () => {}); // its own reset
      await once(raw, 'connect');
      const seen = new Promise<net.Socket>((resolve) => {
        const onRequest = (req: { socket: net.Socket }) => {
          if (req.socket.remotePort !== raw.localPort) return;
          server.off('request', onRequest);
          resolve(req.socket);
        };
        server.on('request', onRequest);
      });
      raw.write(
        `GET /v1/sessions/${id}/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer key-globex\r\n` +
          'accept: text/event-stream\r\n\r\n',
      );
      const serverSide = await seen;
      // The server has the request; the slot's script is the write the pause holds (once a write waits, the
      // route is past its reads). Even sooner, the client would be gone before the slot is asked for: the same
      // defect, a 'close' that fired before it was listened for.
      for (let n = 0; ; n++) {
        const list = await probe.client('LIST');
        if (/flags=b /.test(String(list))) break;
        assert.ok(n < 1000, 'the slot was never asked for');
        await new Promise((r) => setImmediate(r));
      }
      // (Not events.once: the server's socket errors with ECONNRESET first.)
      const closed = new Promise((resolve) => serverSide.once('close', resolve));
      raw.resetAndDestroy();
      await closed;
      await probe.client('UNPAUSE');
      // Both slots are there once the grant arrived: two streams open (retried until the release ran).
      const open: WsClient[] = [];
      try {
        for (let n = 0; open.length < 2; n++) {
          assert.ok(n < 1000, 'a slot of a client that left was never given back');
          const c = await connectWs(h.service.url, id, { token: 'key-globex' }).catch((err: unknown) => {
            if (!(err instanceof UpgradeRefused) || err.status !== 429) throw err;
            return new Promise<undefined>((resolve) => setImmediate(() => resolve(undefined)));
          });
          if (c) open.push(c);
        }
      } finally {
        for (const c of open) c.close();
        await Promise.all(open.map((c) => c.closed));
      }
    } finally {
      await probe.client('UNPAUSE').catch(() => {});
      probe.disconnect();
    }
  });

  it('slots of a replica whose liveness lapsed (killed) are dropped at once; a live one keeps its slots', async () => {
    const g = h.api.as('key-globex');
    const id = ((await g.get('/v1/sessions')).body.data[0]?.id ??
      (await g.post('/v1/sessions', { start: false })).body.id) as string;
    const probe = new Redis(h.redis.url);
    const slots = 'q:{globex}:ws';
    const replicas = 'q:replicas:ws';
    const refused = async (base: string) =>
      assert.rejects(connectWs(base, id, { token: 'key-globex' }), (err: unknown) => {
        assert.ok(err instanceof UpgradeRefused, String(err));
        assert.equal(err.status, 429);
        assert.equal(err.body.error.code, 'quota_exceeded');
        assert.deepEqual(err.body.error.details, { quota: 'TENANT_MAX_WEBSOCKETS', limit: 2 });
        // The slots of a replica killed now are reclaimed by then.
        const after = Number(err.headers['retry-after']);
        assert.ok(after >= 1 && after <= 10, `Retry-After ${String(err.headers['retry-after'])}`);
        return true;
      });
    const open: WsClient[] = [];
    try {
      // The tenant's two slots held by another replica that is alive (its liveness deadline ahead): refused.
      const [sec, usec] = await probe.time();
      const redisNow = Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
      const far = redisNow + 60_000;
      await probe.zadd(replicas, redisNow + 60_000, 'live-replica');
      await probe.zadd(slots, far, 'live-replica:1', far, 'live-replica:2');
      for (const base of [h.service.url, second.url]) await refused(base);
      assert.equal(await probe.zcard(slots), 2);
      // Slots of a replica of an older version (no liveness entry) count until their own expiry.
      await probe.del(slots);
      await probe.zadd(slots, far, 'old-replica:1', far, 'old-replica:2');
      await refused(second.url);
      // What a SIGKILLed replica leaves: its slots, unexpired, and its liveness entry, lapsed a moment ago. The
      // reconnecting followers get both slots at once, on either replica.
      await probe.del(slots);
      await probe.zadd(replicas, redisNow - 1000, 'dead-replica');
      await probe.zadd(slots, far, 'dead-replica:1', far, 'dead-replica:2');
      open.push(await connectWs(h.service.url, id, { token: 'key-globex' }));
      open.push(await connectWs(second.url, id, { token: 'key-globex' }));
      const held = await probe.zrange(slots, 0, -1);
      assert.equal(held.length, 2);
      assert.ok(!held.some((m) => m.startsWith('dead-replica:')), held.join());
      await refused(h.service.url);
    } finally {
      for (const c of open) c.close();
      await Promise.all(open.map((c) => c.closed));
      await probe.zrem(replicas, 'live-replica', 'dead-replica').catch(() => {});
      probe.disconnect();
    }
  });

  it(
    'sends security headers, with a CSP under which /docs renders',
    { skip: !existsSync(CHROMIUM) },
    async () => {
      const r = await fetch(`${h.service.url}/healthz`);
      const csp = r.headers.get('content-security-policy') ?? '';
      assert.match(csp, /default-src 'self'/);
      assert.match(csp, /object-src 'none'/);
      assert.doesNotMatch(csp, /upgrade-insecure-requests/);
      assert.equal(r.headers.get('x-content-type-options'), 'nosniff');
      assert.ok(r.headers.get('x-frame-options'));
      const browser = await chromium.launch({
        executablePath: CHROMIUM,
        args: ['--no-sandbox', '--disable-gpu'],
      });
      try {
        const page = await browser.newPage();
        const violations: string[] = [];
        page.on('console', (m) => {
          if (/Content Security Policy/i.test(m.text())) violations.push(m.text());
        });
        await page.goto(`${h.service.url}/docs`);
        await page.waitForSelector('.swagger-ui .opblock', { timeout: 30_000 });
        assert.deepEqual(violations, []);
      } finally {
        await browser.close();
      }
    },
  );
});

describe('TENANT_MAX_ACTIVE_RUNS across two service processes', () => {
  let h: Harness;
  let second: Service;
  let probe: Redis;
  const env = { API_KEYS: KEYS, TENANT_MAX_ACTIVE_RUNS: '2' };
  /** The fake's turns wait here until the test opens it: runs stay `running` without any timing. */
  let opened: Promise<void>;
  let open!: () => void;
  const closeGate = () => {
    opened = new Promise<void>((r) => (open = r));
  };
  before(async () => {
    h = await startHarness({ env });
    second = await startService({
      PORT: '0',
      HOST: '127.0.0.1',
      REDIS_URL: h.redis.url,
      REDIS_KEY_PREFIX: 'none',
      ANTHROPIC_API_KEY: 'test-key',
      ANTHROPIC_BASE_URL: h.fake.url,
      LOG_LEVEL: 'silent',
      RATE_LIMIT_PER_MIN: '0',
      ...env,
    });
    probe = new Redis(h.redis.url);
    closeGate();
    h.fake.setHandler(async () => {
      await opened;
      return { type: 'message', content: [{ type: 'text', text: 'done' }] };
    });
  });
  after(async () => {
    open?.();
    probe?.disconnect();
    await second?.close();
    await h?.close();
  });

  const refusedRun = (r: { status: number; body: any }) => {
    assert.equal(r.status, 429, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'quota_exceeded');
    assert.deepEqual(r.body.error.details, { quota: 'TENANT_MAX_ACTIVE_RUNS', limit: 2 });
  };
  const slots = (tenant: string) => probe.zrange(`q:{${tenant}}:runs`, 0, -1);

  it('a third concurrent run of a tenant is refused on either replica; others and non-runs are not', async () => {
    const a1 = h.api.as('key-acme');
    const a2 = new Api(second.url, 'key-acme');
    const first = await a1.post('/v1/sessions', { input: 'one' });
    const other = await a2.post('/v1/sessions', { input: 'two' });
    assert.equal(first.status, 201);
    assert.equal(other.status, 201);
    await h.fake.waitForRequests(2, 20_000);
    assert.deepEqual((await slots('acme')).sort(), [first.body.id, other.body.id].sort());

    // A create that would run, on either replica: refused, and nothing is created.
    for (const api of [a1, a2]) refusedRun(await api.post('/v1/sessions', { input: 'three' }));
    assert.equal((await a1.get('/v1/sessions')).body.data.length, 2);
    // A session that does not run yet is created; the message that would start its run is refused, unwritten.
    const idle = await a2.post('/v1/sessions', { start: false });
    assert.equal(idle.status, 201);
    refusedRun(await a1.post(`/v1/sessions/${idle.body.id}/messages`, { text: 'go' }));
    const still = (await a2.get(`/v1/sessions/${idle.body.id}`)).body;
    assert.equal(still.status, 'idle');
    assert.equal(still.revision, idle.body.revision);
    // A follow-up to a running session starts no run: queued as usual.
    assert.equal((await a2.post(`/v1/sessions/${first.body.id}/messages`, { text: 'later' })).status, 202);
    // Another tenant runs.
    const g = await h.api.as('key-globex').post('/v1/sessions', { input: 'globex' });
    assert.equal(g.status, 201);
    assert.equal(g.body.status, 'running');

    // Runs end: their slots are given back, and the refused run may start.
    open();
    await a1.waitStatus(first.body.id, 'idle', 20_000);
    await a1.waitStatus(other.body.id, 'idle', 20_000);
    await h.api.as('key-globex').waitStatus(g.body.id, 'idle', 20_000);
    // A run's end gives its slot back after the commit that shows the session idle (src/store/runs.ts `drop`).
    await untilKeyspace(
      h.redis.url,
      probe,
      'q:{acme}:runs',
      async () => {
        const left = await slots('acme');
        return left.length === 0 ? null : `slots held: ${left.join(', ')}`;
      },
      20_000,
    );
    assert.equal((await a2.post(`/v1/sessions/${idle.body.id}/messages`, { text: 'go' })).status, 202);
    await a2.waitStatus(idle.body.id, 'idle', 20_000);
  });

  it('slots that outlived their runs (a crash between a run end and its release) do not count', async () => {
    const a1 = h.api.as('key-acme');
    const ids = (await a1.get('/v1/sessions')).body.data.map((s: { id: string }) => s.id) as string[];
    assert.ok(ids.length >= 2);
    // What a replica that died after the runs' last commits leaves: slots of sessions that are idle, taken long ago.
    const long = Date.now() - 60_000;
    await probe.zadd('q:{acme}:runs', long, ids[0]!, long, ids[1]!);
    closeGate();
    // The sessions are not running: their slots are dropped, and two new runs start.
    const ok = [await a1.post('/v1/sessions', { input: 'a' }), await a1.post('/v1/sessions', { input: 'b' })];
    assert.deepEqual(
      ok.map((r) => r.status),
      [201, 201],
    );
    refusedRun(await new Api(second.url, 'key-acme').post('/v1/sessions', { input: 'c' }));
    open();
    for (const r of ok) await a1.waitStatus(r.body.id, 'idle', 20_000);
  });
});
