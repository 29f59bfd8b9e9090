/**
 * The last event of a log whose owner is gone (`session.deleted` of a session deleted by its TTL, `schedule.deleted`)
 * reaches the webhooks when the replica that wrote it is SIGKILLed right after the delete, before its own fan-out:
 * the survivor's sweep of the mark finds the meta hash gone, and learns the log's tenant from what the delete left
 * (a session's `s:{id}:g`, a schedule's fan-out state), where the fan-out state alone has no tenant when no fan-out
 * of that log ever ran (a webhook that listens only for the delete). Killed at that point through a Redis proxy in
 * front of the doomed replica (test/helpers/redis-proxy.ts): its delete lands, nothing after it does.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { startRedisProxy, type RedisProxy } from '../helpers/redis-proxy.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { within } from '../helpers/promises.js';

const ENV = {
  API_KEYS: 'acme:key-a',
  WEBHOOK_ALLOW_PRIVATE: 'true',
  WEBHOOK_POLL_MS: '100',
  // The survivor sweeps the dead replica's mark this long after it was written.
  WEBHOOK_SWEEP_GRACE_MS: '2000',
  WEBHOOK_TIMEOUT_MS: '2000',
  DEADLINE_SWEEP_MS: '100',
};

describe('a delete whose replica dies before its fan-out', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let r: Redis;
  const receiver = new WebhookReceiver();
  const procs: ServiceProcess[] = [];
  let proxy: RedisProxy | null = null;

  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    r = new Redis(redis.url);
    await receiver.start();
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    await proxy?.close();
    await receiver.close();
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });

  /**
   * A replica on the proxy with a webhook of `events`; `act` makes it write the delete whose command holds
   * `marker`, which lands; the replica is killed before anything after it, `left` checks what it left, then a
   * survivor is started.
   */
  async function killedAfter(
    events: string[],
    marker: (api: ServiceProcess['api']) => Promise<string>,
    act: (api: ServiceProcess['api']) => Promise<unknown>,
    left: () => Promise<void>,
  ): Promise<void> {
    proxy = await startRedisProxy(redis.port);
    const doomed = await spawnService(serviceEnv(proxy.url, fake.url, ENV), { name: 'doomed' });
    procs.push(doomed);
    const api = doomed.api.as('key-a');
    const hook = await api.post('/v1/webhooks', { url: receiver.url, events });
    assert.equal(hook.status, 201, JSON.stringify(hook.body));
    receiver.setSecret(hook.body.secret);
    const held = proxy.holdAfter(await marker(api));
    void act(api).catch(() => undefined);
    await within(held, 60_000, 'the delete');
    await doomed.kill();
    await proxy.close();
    proxy = null;
    await left();
    procs.push(await spawnService(serviceEnv(redis.url, fake.url, ENV), { name: 'survivor' }));
  }

  /** The delete of `id` landed, and no fan-out of its log ever ran (no cursor): the survivor's sweep is the first. */
  async function deletedUnswept(id: string): Promise<void> {
    assert.equal(await r.exists(`s:{${id}}`), 0, 'deleted');
    assert.equal(await r.exists(`s:{${id}}:e`), 1, 'its log is kept');
    assert.equal(await r.hget(`s:{${id}}:wh`, 'c'), null, 'no fan-out of this log ever ran');
  }

  it('session.deleted of a session deleted by its TTL', async () => {
    let id = '';
    await killedAfter(
      ['session.deleted'],
      async (api) => {
        const created = await api.post('/v1/sessions', { input: 'hello', start: false, ttl_s: 1 });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        id = created.body.id;
        // Only the expiry's destroy (destroy-11.lua) carries this argument.
        return JSON.stringify({ id, reason: 'expired' });
      },
      // The replica's own retention sweep deletes it once its TTL is over.
      async () => undefined,
      () => deletedUnswept(id),
    );
    await within(
      receiver.until(() => receiver.accepted.some((m) => m.body.session_id === id)),
      30_000,
      'session.deleted at the receiver',
    );
    const got = receiver.accepted.filter((m) => m.body.session_id === id);
    assert.equal(got.length, 1);
    assert.equal(got[0]!.body.type, 'session.deleted');
    assert.equal(got[0]!.body.data.reason, 'expired');
    assert.equal(got[0]!.id, `msg_${id}_${got[0]!.body.id}`);
  });

  it('schedule.deleted of a schedule deleted by DELETE', async () => {
    let id = '';
    await killedAfter(
      ['schedule.deleted'],
      async (api) => {
        const created = await api.post('/v1/schedules', { cron: '0 0 1 1 *', session: { input: 'yearly' } });
        assert.equal(created.status, 201, JSON.stringify(created.body));
        id = created.body.id;
        // Only the delete's script (delete-*.lua) carries this argument.
        return JSON.stringify({ schedule_id: id });
      },
      (api) => api.req('DELETE', `/v1/schedules/${id}`),
      () => deletedUnswept(id),
    );
    await within(
      receiver.until(() => receiver.accepted.some((m) => m.body.session_id === id)),
      30_000,
      'schedule.deleted at the receiver',
    );
    const got = receiver.accepted.filter((m) => m.body.session_id === id);
    assert.deepEqual(
      got.map((m) => [m.body.type, m.body.data.schedule_id]),
      [['schedule.deleted', id]],
    );
  });
});
