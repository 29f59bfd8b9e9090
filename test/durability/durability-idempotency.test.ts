/**
 * `Idempotency-Key` across a crash and a Redis hiccup. A replica SIGKILLed after a keyed request's change landed in
 * Redis but before its answer was kept (a proxy in front of Redis withholds the answer's record: the idem-keep
 * script's `"state":"done"` record) frees the key when its lease lapses; the client's retry, on another replica,
 * must find the change done: one session, one appended message. And a 503 answered while Redis is paused frees the
 * key at once: the retry once Redis answers again is not 409 `idempotency_in_progress`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { startRedisProxy, type RedisProxy } from '../helpers/redis-proxy.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import type { Api, ApiResponse } from '../helpers/service.js';
import { redisClient, until } from './chaos-lib.js';

/** The keyed request's lease (IN_FLIGHT_TTL_MS, 10 s) lapses, plus slack for a busy machine. */
const LEASE_LAPSE_MS = 20_000;
/** What only the write of a kept answer carries (src/store/idempotency.ts `keep`). */
const KEPT_ANSWER = '"state":"done"';

/**
 * The whole suite's bound, against a hang only: each test bounds its own waits. Its tests start and kill processes
 * one after another, and on a machine under load (a CI beside other work) the crash suite took 254 s.
 */
describe('Idempotency-Key across a SIGKILL and a Redis pause', { timeout: 600_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let fake: FakeAnthropic;
  let proxy: RedisProxy;
  let survivor: ServiceProcess;
  const env = (redisUrl: string) => serviceEnv(redisUrl, fake.url, { WEBHOOK_ALLOW_PRIVATE: 'true' });

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic()]);
    r = redisClient(redis.url);
    survivor = await spawnService(env(redis.url), { name: 'survivor' });
  });
  after(async () => {
    await survivor?.kill();
    await proxy?.close();
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });

  /**
   * Sends `send` to a replica behind a fresh proxy, kills it once its answer's record is about to be written (the
   * change is in Redis, the record never lands), then sends the same request to the survivor until the key's lease
   * has lapsed (409 until then). The survivor's answer.
   */
  async function killedBeforeRecord(send: (api: Api) => Promise<ApiResponse>): Promise<ApiResponse> {
    proxy = await startRedisProxy(redis.port);
    const doomed = await spawnService(env(proxy.url), { name: 'doomed' });
    const held = proxy.holdAt(KEPT_ANSWER);
    const first = send(doomed.api).catch(() => null);
    await held;
    await doomed.kill();
    assert.equal(await first, null, 'the killed replica answered nothing');
    await proxy.close();
    let retry: ApiResponse | undefined;
    await until(
      async () => {
        retry = await send(survivor.api);
        return retry.status !== 409;
      },
      LEASE_LAPSE_MS,
      'the retry is no longer 409 idempotency_in_progress',
      250,
    );
    return retry!;
  }

  it('a keyed create killed between its write and its record creates one session', async () => {
    const body = { input: 'create once', start: false, metadata: { case: 'create-once' } };
    const retry = await killedBeforeRecord((api) =>
      api.post('/v1/sessions', body, { 'idempotency-key': 'create-once' }),
    );
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    const list = await survivor.api.get('/v1/sessions?metadata.case=create-once');
    assert.deepEqual(
      list.body.data.map((s: { id: string }) => s.id),
      [retry.body.id],
      'exactly one session was created',
    );
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    // The retry's answer is kept now: the next one replays it.
    const again = await survivor.api.post('/v1/sessions', body, { 'idempotency-key': 'create-once' });
    assert.equal(again.status, 201);
    assert.equal(again.body.id, retry.body.id);
  });

  it('a keyed follow-up killed between its write and its record is appended once', async () => {
    const created = await survivor.api.post('/v1/sessions', { input: 'hello', start: false });
    assert.equal(created.status, 201);
    const id: string = created.body.id;
    const text = 'append me once';
    const retry = await killedBeforeRecord((api) =>
      api.post(`/v1/sessions/${id}/messages`, { text }, { 'idempotency-key': 'append-once' }),
    );
    assert.equal(retry.status, 202, JSON.stringify(retry.body));
    // The run the message started (taken over from the killed replica) ends; the history has the message once.
    await survivor.api.waitStatus(id, 'idle', 30_000);
    const history = await survivor.api.get(`/v1/sessions/${id}/messages`);
    const users = JSON.stringify(history.body.data.filter((m: { role: string }) => m.role === 'user'));
    assert.equal(users.split(text).length - 1, 1, `the message is in the history once: ${users}`);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  });

  it('a keyed fork killed between its write and its record makes one fork', async () => {
    const source = await survivor.api.post('/v1/sessions', { input: 'fork me', start: false });
    assert.equal(source.status, 201);
    const body = { at_iteration: 0, metadata: { case: 'fork-once' } };
    const retry = await killedBeforeRecord((api) =>
      api.post(`/v1/sessions/${source.body.id}/fork`, body, { 'idempotency-key': 'fork-once' }),
    );
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    const list = await survivor.api.get('/v1/sessions?metadata.case=fork-once');
    assert.deepEqual(
      list.body.data.map((x: { id: string }) => x.id),
      [retry.body.id],
      'exactly one fork was made',
    );
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  });

  it('a keyed webhook create killed between its write and its record makes one webhook, its secret replayed', async () => {
    const body = { url: 'http://127.0.0.1:9/once', events: ['session.status'] };
    const retry = await killedBeforeRecord((api) =>
      api.post('/v1/webhooks', body, { 'idempotency-key': 'webhook-once' }),
    );
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    const list = await survivor.api.get('/v1/webhooks');
    assert.deepEqual(
      list.body.data.filter((w: { url: string }) => w.url === body.url).map((w: { id: string }) => w.id),
      [retry.body.id],
      'exactly one webhook was made',
    );
    assert.match(retry.body.secret, /^whsec_/);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  });

  it('a keyed schedule create killed between its write and its record makes one schedule', async () => {
    const body = { cron: '0 0 1 1 *', session: { input: 'new year' }, paused: true };
    const retry = await killedBeforeRecord((api) =>
      api.post('/v1/schedules', body, { 'idempotency-key': 'schedule-once' }),
    );
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    const list = await survivor.api.get('/v1/schedules');
    assert.deepEqual(
      list.body.data.map((x: { id: string }) => x.id),
      [retry.body.id],
      'exactly one schedule was made',
    );
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
  });

  it('a 503 while Redis is paused frees the key: the retry once Redis answers is not 409, after another 503', async () => {
    // Behind a proxy that lets the reservation through and holds what follows until Redis is paused: the request's
    // next commands reach a paused Redis (`CLIENT PAUSE … ALL`), time out, and it answers 503.
    proxy = await startRedisProxy(redis.port);
    const svc = await spawnService(serviceEnv(proxy.url, fake.url), { name: 'paused' });
    try {
      const body = { input: 'after a pause', start: false, metadata: { case: 'pause' } };
      const key = { 'idempotency-key': 'pause-retry' };
      // Counted, not looked up: a line of an earlier blip must not stand for this pause's end.
      const answersAgain = () => svc.logs().filter((l) => l['msg'] === 'redis answers again').length;
      const upBefore = answersAgain();
      const reserved = proxy.holdAfter('"state":"pending"');
      const during = svc.api.post('/v1/sessions', body, key);
      await reserved;
      await until(
        async () => {
          const keys = (await r.keys('idem:*')).filter((k) => !k.includes(':~'));
          return (await Promise.all(keys.map((k) => r.get(k)))).some((v) => v?.includes('"pending"'));
        },
        5000,
        'the reservation landed',
      );
      assert.equal(await r.call('CLIENT', 'PAUSE', '6000', 'ALL'), 'OK');
      proxy.release();
      const answer = await during;
      // A retry while Redis is still away is answered 503 too, and given up in turn: it must not hide the first
      // request's record, which is the one to drop.
      const early = await svc.api.post('/v1/sessions', body, key);
      await until(() => answersAgain() > upBefore, 15_000, 'the service sees Redis answer again', 50);
      // At once: not after the key's lease (10 s) lapses.
      const retry = await svc.api.post('/v1/sessions', body, key);
      assert.notEqual(retry.status, 409, JSON.stringify(retry.body));
      assert.equal(retry.status, 201, JSON.stringify(retry.body));
      assert.equal(answer.status, 503, JSON.stringify(answer.body));
      assert.equal(answer.body.error.code, 'store_unavailable');
      assert.equal(early.status, 503, JSON.stringify(early.body));
      const list = await svc.api.get('/v1/sessions?metadata.case=pause');
      assert.equal(list.body.data.length, 1);
    } finally {
      await svc.kill();
    }
  });
});
