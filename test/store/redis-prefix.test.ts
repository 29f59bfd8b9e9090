/**
 * REDIS_KEY_PREFIX: two services with different prefixes share one real redis-server. Each runs a session with a
 * tool loop and a WebSocket follower, a webhook (delivered), a schedule (fired), an idempotent create and a client
 * token; then SCAN finds every key under one of the two prefixes, with the session's hash tag `{id}` the first braces
 * after it (a Redis Cluster keeps a session's keys in one slot), every pub/sub channel in use (PUBSUB CHANNELS) and
 * every message published (PSUBSCRIBE *) carries a prefix, and neither service sees the other's sessions, schedules
 * or webhooks.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Redis } from 'ioredis';
import { WebSocket } from 'ws';
import { loadConfig } from '../../src/config.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { LoopModel, redisClient, tagged, until } from '../durability/chaos-lib.js';

const PREFIXES = ['trs:', 'other-app:'] as const;

async function allKeys(r: Redis): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await r.scan(cursor, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

describe('REDIS_KEY_PREFIX', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let watcher: Redis;
  let fake: FakeAnthropic;
  const receivers = PREFIXES.map(() => new WebhookReceiver());
  const services: ServiceProcess[] = [];
  const published: string[] = [];

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    await Promise.all(receivers.map((w) => w.start()));
    r = redisClient(redis.url);
    watcher = redisClient(redis.url);
    watcher.on('pmessage', (_pattern: string, channel: string) => published.push(channel));
    await watcher.psubscribe('*');
    for (const prefix of PREFIXES) {
      const env = serviceEnv(redis.url, fake.url, {
        REDIS_KEY_PREFIX: prefix,
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_POLL_MS: '50',
      });
      services.push(await spawnService(env, { name: `prefix-${prefix}` }));
    }
  });
  after(async () => {
    await Promise.all(services.map((s) => s.kill()));
    r?.disconnect();
    watcher?.disconnect();
    await Promise.all(receivers.map((w) => w.close()));
    await fake?.close();
    await redis?.stop();
  });

  it('defaults to trs: and refuses braces', () => {
    assert.equal(loadConfig({}).REDIS_KEY_PREFIX, 'trs:');
    assert.equal(loadConfig({ REDIS_KEY_PREFIX: 'none' }).REDIS_KEY_PREFIX, '');
    assert.throws(() => loadConfig({ REDIS_KEY_PREFIX: 'a{b}:' }), /REDIS_KEY_PREFIX/);
  });

  it('puts every key and channel under the prefix; services of two prefixes do not see each other', async () => {
    const model = new LoopModel({ turns: 3, eventDelayMs: 5 });
    fake.setHandler(model.handler);
    const made: Array<{ session: string; schedule: string; webhook: string }> = [];
    for (const [i, svc] of services.entries()) {
      const hook = await svc.api.post('/v1/webhooks', { url: receivers[i]!.url, events: ['session.status'] });
      assert.equal(hook.status, 201, JSON.stringify(hook.body));
      receivers[i]!.setSecret(hook.body.secret);
      const tag = `prefix${i}`;
      const res = await svc.api.post(
        '/v1/sessions',
        { input: tagged(tag), tools: ['calculate_sum'] },
        { 'idempotency-key': `create-${i}` },
      );
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const id = res.body.id as string;
      const token = await svc.api.post('/v1/client-tokens', { session_id: id, scopes: ['read'] });
      assert.equal(token.status, 201, JSON.stringify(token.body));
      // A follower: its relay subscribes the session's events channel while the run publishes notices.
      const ws = new WebSocket(`${svc.url.replace('http', 'ws')}/v1/sessions/${id}/stream`);
      const types: string[] = [];
      ws.on('message', (data) => types.push(String(JSON.parse(String(data)).type)));
      await until(() => types.includes('session.status'), 10_000, 'a first event on the WebSocket');
      const done = await svc.api.waitStatus(id, ['idle', 'failed'], 20_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      await until(() => types.filter((t) => t === 'session.status').length >= 2, 10_000, 'the run on the WS');
      ws.close();
      const at = new Date(Date.now() + 500).toISOString();
      const sch = await svc.api.post('/v1/schedules', { at, session: { input: `scheduled ${i}` } });
      assert.equal(sch.status, 201, JSON.stringify(sch.body));
      await until(
        async () => (await svc.api.get(`/v1/schedules/${sch.body.id}`)).body.fires >= 1,
        15_000,
        'fire',
      );
      made.push({ session: id, schedule: sch.body.id, webhook: hook.body.id });
    }
    for (const w of receivers) await until(() => w.accepted.length >= 1, 15_000, 'a webhook delivered');

    const keys = await allKeys(r);
    const stray = keys.filter((k) => !PREFIXES.some((p) => k.startsWith(p)));
    assert.deepEqual(stray, [], 'keys without a prefix');
    for (const [i, prefix] of PREFIXES.entries()) {
      const mine = keys.filter((k) => k.startsWith(prefix));
      const { session } = made[i]!;
      const ofSession = mine.filter((k) => k.includes(`{${session}}`));
      assert.ok(ofSession.length >= 3, `${prefix}: the session's keys ${JSON.stringify(ofSession)}`);
      for (const k of ofSession) {
        // The hash tag is the first `{…}` of the key, prefix included: one slot for all of them.
        assert.equal(/\{([^}]*)\}/.exec(k)?.[1], session, k);
      }
      // Global and tenant keys (indexes, the webhooks' due set) are prefixed as well.
      for (const kind of ['t:{default}:sessions', 't:{default}:schedules', 'wh:tenants']) {
        assert.ok(mine.includes(`${prefix}${kind}`), `${prefix}${kind} in ${JSON.stringify(mine)}`);
      }
    }
    const channels = (await r.pubsub('CHANNELS', '*')) as string[];
    assert.ok(channels.length > 0);
    assert.deepEqual(
      channels.filter((c) => !PREFIXES.some((p) => c.startsWith(p))),
      [],
      'channels without a prefix',
    );
    assert.ok(
      published.some((c) => c === `trs:ev:{${made[0]!.session}}`),
      'notices on the prefixed channel',
    );
    assert.deepEqual(
      [...new Set(published.filter((c) => !PREFIXES.some((p) => c.startsWith(p))))],
      [],
      'messages published on unprefixed channels',
    );

    // Isolation: neither sees the other's resources.
    for (const [i, svc] of services.entries()) {
      const other = made[1 - i]!;
      assert.equal((await svc.api.get(`/v1/sessions/${other.session}`)).status, 404);
      assert.equal((await svc.api.get(`/v1/schedules/${other.schedule}`)).status, 404);
      assert.equal((await svc.api.get(`/v1/webhooks/${other.webhook}`)).status, 404);
      const list = (await svc.api.get('/v1/sessions?limit=100')).body.data as Array<{ id: string }>;
      assert.ok(list.some((s) => s.id === made[i]!.session));
      assert.ok(!list.some((s) => s.id === other.session), 'the other prefix’s session is not listed');
    }
  });
});
