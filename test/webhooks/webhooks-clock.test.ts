/**
 * Webhook claims, retries and the due set are of Redis's clock, not of the replica's: a replica whose clock is far
 * ahead does not take a message whose attempt is in flight on another replica for expired (it was delivered twice at
 * once), one behind does not make a failed attempt's retry due at once, and one ahead neither finds an endpoint due
 * early nor leaves the one it made due waiting. The replicas are the outbox's calls made with this process's
 * Date.now() moved (as the dispatcher made them). Real Redis, the outbox alone.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { WebhookStore } from '../../src/webhooks/store.js';
import type { OutboxLimits } from '../../src/webhooks/outbox.js';
import { webhookRecord } from '../helpers/webhook-record.js';
import { skewed } from '../helpers/skewed-clock.js';
import { DUE_KEY } from '../../src/webhooks/keys.js';

/** Far more than a claim's lease and a retry's delay, either way. */
const SKEW_MS = 10 * 60_000;
const LIMITS: OutboxLimits = {
  maxPending: 100,
  leaseMs: 20_000,
  concurrency: 4,
  retryForMs: 86_400_000,
  disableAfterMs: 86_400_000,
  logMax: 100,
};
const BOUNDS = { count: 100, bytes: 1_000_000 };
const ENTRY = {
  message_id: 'm',
  event_id: 'e',
  event_type: 'session.status',
  session_id: 's',
  attempt: 1,
  status_code: 500,
  error: null,
  duration_ms: 1,
  at: new Date().toISOString(),
};

describe('webhook outboxes with a replica whose clock is off', { timeout: 60_000 }, () => {
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

  it('a replica ahead does not claim a message in flight again', async () => {
    await store.create(webhookRecord('wh_ahead', 'acme'), 10);
    await store.outbox.enqueue('wh_ahead', [['msg_ses_a_1-0', '{"type":"session.status"}']], BOUNDS);
    const first = await store.outbox.claim('wh_ahead', LIMITS, 4);
    assert.equal(first.kind === 'ok' && first.messages.length, 1, JSON.stringify(first));
    // The attempt is in flight (its lease runs 20 s); a replica 10 minutes ahead claims the endpoint.
    const again = await skewed(SKEW_MS, () => store.outbox.claim('wh_ahead', LIMITS, 4));
    assert.equal(again.kind, 'ok');
    assert.deepEqual(
      again.kind === 'ok' && again.messages,
      [],
      'the message in flight was not claimed again',
    );
    // The first attempt settles: delivered, once.
    const s = await store.outbox.settle('wh_ahead', 'msg_ses_a_1-0', true, 1000, ENTRY, LIMITS);
    assert.equal(s.outcome, 'delivered');
  });

  it("a replica behind does not make a failed attempt's retry due at once", async () => {
    await store.create(webhookRecord('wh_behind', 'acme'), 10);
    await store.outbox.enqueue('wh_behind', [['msg_ses_b_1-0', '{"type":"session.status"}']], BOUNDS);
    const first = await store.outbox.claim('wh_behind', LIMITS, 4);
    assert.equal(first.kind === 'ok' && first.messages.length, 1, JSON.stringify(first));
    // A replica 10 minutes behind settles the attempt as failed, to be retried in 60 s.
    const s = await skewed(-SKEW_MS, () =>
      store.outbox.settle('wh_behind', 'msg_ses_b_1-0', false, 60_000, ENTRY, LIMITS),
    );
    assert.equal(s.outcome, 'retrying');
    const [sec] = await client.time();
    assert.ok(s.next > Number(sec) * 1000 + 50_000, `retry due at ${s.next}`);
    // Another replica, whose clock is Redis's, finds nothing due.
    const again = await store.outbox.claim('wh_behind', LIMITS, 4);
    assert.deepEqual(again.kind === 'ok' && again.messages, [], 'the retry waits for its delay');
  });

  it('an endpoint made due is due at once, in the same millisecond too (its score has microseconds)', async () => {
    // One transaction: the read runs right after the write, within the same millisecond of Redis's clock but for
    // a write at a millisecond's very end.
    const [[, made], [, read]] = (await (client as any)
      .multi()
      .whDueNow(DUE_KEY, 'wh_same_ms', 'fresh')
      .whDueRead(DUE_KEY, 0, 100)
      .exec()) as [[null, number], [null, string[]]];
    assert.equal(made, 1);
    assert.ok(read.slice(1).includes('wh_same_ms'), `due at once: ${JSON.stringify(read)}`);
    await client.zrem(DUE_KEY, 'wh_same_ms');
  });

  it('the due set is of Redis’s clock: an endpoint made due by a replica ahead is due for the others', async () => {
    await store.create(webhookRecord('wh_due', 'acme'), 10);
    await skewed(SKEW_MS, () =>
      store.outbox.enqueue('wh_due', [['msg_ses_c_1-0', '{"type":"session.status"}']], BOUNDS),
    );
    const { due } = await store.outbox.due(100);
    assert.ok(
      due.some(([id]) => id === 'wh_due'),
      'due now for a replica whose clock is Redis’s',
    );
    // A retry due in 60 s is not due for a replica ahead.
    const c = await store.outbox.claim('wh_due', LIMITS, 4);
    assert.equal(c.kind === 'ok' && c.messages.length, 1);
    const s = await store.outbox.settle('wh_due', 'msg_ses_c_1-0', false, 60_000, ENTRY, LIMITS);
    await store.outbox.reschedule('wh_due', due.find(([id]) => id === 'wh_due')![1], s.next);
    const ahead = await skewed(SKEW_MS, () => store.outbox.due(100));
    assert.ok(!ahead.due.some(([id]) => id === 'wh_due'), 'not due early for a replica ahead');
  });
});
