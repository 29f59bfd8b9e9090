/**
 * A Redis that hangs (CLIENT PAUSE: the connection stays open, nothing is answered) — unlike a killed one, which
 * refuses connections at once (test/store/outage.test.ts). /readyz says not ready within ~1 s; a request whose command was
 * already sent gets its 503 `store_unavailable` when that command times out (3 s), one that starts once the health
 * probe has seen Redis hang gets it at once, not after a command timeout per command; the timeouts are counted in
 * `trs_redis_errors_total{kind="command_timeout"}`; everything works again once Redis answers.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import type { Api } from '../helpers/service.js';
import { parseExposition } from '../helpers/prometheus.js';
import { redisClient, until } from '../durability/chaos-lib.js';

/** The command timeout (src/plugins/redis.ts) plus slack for a busy machine. */
const IN_FLIGHT_BOUND_MS = 4500;
/** Once the probe has seen Redis hang: no command is sent, the answer is immediate (slack for a busy machine). */
const FAST_BOUND_MS = 1000;
/** How long Redis stays paused: longer than every step below needs. */
const PAUSE_MS = 12_000;

async function timed(api: Api, method: string, path: string, body?: unknown) {
  const t0 = Date.now();
  const res = await api.req(method, path, body);
  return { ...res, ms: Date.now() - t0 };
}

function assertStoreDown(
  res: { status: number; body: any; headers: Headers; ms: number },
  boundMs: number,
  what: string,
) {
  assert.equal(res.status, 503, `${what}: ${JSON.stringify(res.body)}`);
  assert.equal(res.body.error.code, 'store_unavailable', what);
  assert.ok(Number(res.headers.get('retry-after')) > 0, `${what}: Retry-After`);
  assert.ok(res.ms < boundMs, `${what} answered in ${res.ms} ms (bound ${boundMs} ms)`);
}

async function redisErrors(api: Api, kind: string): Promise<number> {
  const text = (await api.get('/metrics')).body as string;
  return parseExposition(text)
    .filter((s) => s.name === 'trs_redis_errors_total' && s.labels['kind'] === kind)
    .reduce((n, s) => n + s.value, 0);
}

describe('a Redis that hangs', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let fake: FakeAnthropic;
  let svc: ServiceProcess;

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic()]);
    r = redisClient(redis.url);
    svc = await spawnService(serviceEnv(redis.url, fake.url), { name: 'freeze' });
  });
  after(async () => {
    await svc?.kill();
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });

  it('answers 503 in bounded time, counts the timeouts, and recovers when Redis answers again', async () => {
    const idle = await svc.api.post('/v1/sessions', { input: 'before' });
    assert.equal(idle.status, 201);
    await svc.api.waitStatus(idle.body.id, 'idle', 10_000);
    const timeoutsBefore = await redisErrors(svc.api, 'command_timeout');

    // `CLIENT PAUSE … ALL` holds every client's commands (this one's too, from the next) until it ends.
    assert.equal(await r.call('CLIENT', 'PAUSE', String(PAUSE_MS), 'ALL'), 'OK');
    const pausedAt = Date.now();
    // Their commands stay in flight until the command timeout; the requests below start while they are.
    const inFlight = Promise.all([
      timed(svc.api, 'POST', '/v1/sessions', { input: 'during' }),
      timed(svc.api, 'GET', `/v1/sessions/${idle.body.id}`),
    ]);

    await svc.waitForLog((l) => l['msg'] === 'redis does not answer; refusing commands until it does', 5000);
    // Not queued behind the hung auto-pipeline: refused at once although commands sent before are still in flight.
    const early = await Promise.all([
      timed(svc.api, 'POST', '/v1/sessions', { input: 'during' }),
      timed(svc.api, 'GET', `/v1/sessions/${idle.body.id}`),
    ]);
    for (const res of early) assertStoreDown(res, FAST_BOUND_MS, 'a request while earlier commands hang');
    const [create, get] = await inFlight;
    assertStoreDown(create, IN_FLIGHT_BOUND_MS, 'create sent as Redis froze');
    assertStoreDown(get, IN_FLIGHT_BOUND_MS, 'GET sent as Redis froze');
    const ready = await timed(svc.api, 'GET', '/readyz');
    assert.equal(ready.status, 503);
    assert.equal(ready.body.redis, 'unavailable');
    assert.ok(ready.headers.get('retry-after'));
    assert.ok(ready.ms < 1500, `readyz answered in ${ready.ms} ms`);
    for (let i = 0; i < 3; i++) {
      const [c, g, list] = await Promise.all([
        timed(svc.api, 'POST', '/v1/sessions', { input: 'during' }),
        timed(svc.api, 'GET', `/v1/sessions/${idle.body.id}`),
        timed(svc.api, 'GET', '/v1/sessions'),
      ]);
      assertStoreDown(c, FAST_BOUND_MS, 'create once the probe saw Redis hang');
      assertStoreDown(g, FAST_BOUND_MS, 'GET once the probe saw Redis hang');
      assertStoreDown(list, FAST_BOUND_MS, 'list once the probe saw Redis hang');
    }
    assert.ok(
      (await redisErrors(svc.api, 'command_timeout')) > timeoutsBefore,
      'trs_redis_errors_total{kind="command_timeout"} went up',
    );
    assert.ok(Date.now() - pausedAt < PAUSE_MS, 'the checks above ran while Redis was paused');

    // Redis answers again when the pause ends: ready, and new work runs.
    await svc.waitForLog((l) => l['msg'] === 'redis answers again', PAUSE_MS + 10_000);
    await until(async () => (await svc.api.get('/readyz')).status === 200, 5000, 'ready again');
    assert.equal((await svc.api.get(`/v1/sessions/${idle.body.id}`)).status, 200);
    const later = await svc.api.post('/v1/sessions', { input: 'after' });
    assert.equal(later.status, 201);
    assert.equal((await svc.api.waitStatus(later.body.id, ['idle', 'failed'], 10_000)).status, 'idle');
    assert.ok(svc.running());
  });
});
