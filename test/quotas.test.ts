import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { startHarness, type Harness } from './helpers/service.js';
import { startService, type Service } from '../src/boot.js';
import { connectWs, UpgradeRefused, type WsClient } from './fixtures/event-clients.js';
import { loadConfig } from '../src/config.js';
import { Api } from './helpers/service.js';

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
    assert.ok(config.TENANT_MAX_WEBSOCKETS > 0);
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
