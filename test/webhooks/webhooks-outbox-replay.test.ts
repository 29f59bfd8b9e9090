/**
 * A message put in an outbox is delivered even when the process that put it there died before it scheduled the
 * endpoint (found by a probe): the fan-out's replay of the same events (another replica, from the session's cursor)
 * finds the message pending already, adds nothing, and must schedule the endpoint all the same; nothing else would.
 * Real Redis, the outbox alone.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { WebhookStore } from '../../src/webhooks/store.js';
import { webhookRecord } from '../helpers/webhook-record.js';

describe('a webhook outbox written by a process that died before scheduling it', { timeout: 60_000 }, () => {
  let redis: TestRedis;
  let client: Redis;
  let store: WebhookStore;
  before(async () => {
    redis = await startTestRedis();
    client = new Redis(redis.url);
    store = new WebhookStore(client);
  });
  after(async () => {
    client?.disconnect();
    await redis?.stop();
  });

  it('is scheduled by the replay that finds its message pending', async () => {
    await store.create(webhookRecord('wh_replay', 'acme'), 10);
    const bounds = { count: 100, bytes: 1_000_000 };
    const msg: [string, string] = ['msg_ses_x_1-0', '{"type":"session.status"}'];
    assert.deepEqual(await store.outbox.enqueue('wh_replay', [msg], bounds), {
      added: 1,
      dropped: 0,
    });
    // The process died after the outbox script and before its ZADD: the endpoint is not due.
    await client.zrem('wh:due', 'wh_replay');
    const replay = await store.outbox.enqueue('wh_replay', [msg], bounds);
    assert.deepEqual(replay, { added: 0, dropped: 0 }, 'nothing added twice');
    assert.notEqual(await client.zscore('wh:due', 'wh_replay'), null, 'the endpoint is due');
    const { due } = await store.outbox.due(10);
    assert.ok(due.some(([id]) => id === 'wh_replay'));
  });
});
