import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { text } from '../fake/script.js';

/** Keys of a session (its hash tag) left in Redis, by SCAN. */
async function sessionKeys(redis: Redis, id: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `*{${id}}*`, 'COUNT', 1000);
    found.push(...keys);
    cursor = next;
  } while (cursor !== '0');
  return found;
}

async function until(pred: () => Promise<boolean>, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await pred()) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe('retention (ttl_s, SESSION_TTL_S)', () => {
  let redis: TestRedis;
  let h: Harness;
  let r: Redis;
  const receiver = new WebhookReceiver();
  before(async () => {
    redis = await startTestRedis();
    await receiver.start();
    h = await startHarness({
      redis,
      env: {
        API_KEYS: 'acme:key-acme',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_POLL_MS: '50',
        DEADLINE_SWEEP_MS: '50',
        // The deleted session's log keeps its `session.deleted` event this long (60 s outside tests), longer than
        // the webhooks' last sweep of a log takes to come (grace + poll: the service refuses a shorter one).
        DELETED_LOG_TTL_MS: '2000',
        WEBHOOK_SWEEP_GRACE_MS: '1000',
        SESSION_TTL_S: '86400',
      },
    });
    r = new Redis(redis.url);
    const w = await h.api.post('/v1/webhooks', { url: receiver.url, events: ['session.deleted'] });
    assert.equal(w.status, 201, JSON.stringify(w.body));
    receiver.setSecret(w.body.secret);
  });
  after(async () => {
    r.disconnect();
    await h.close();
    await receiver.close();
    await redis.stop();
  });
  beforeEach(() => h.fake.reset());

  const deletedEvent = (id: string) =>
    receiver.accepted.find((x) => x.body.type === 'session.deleted' && x.body.session_id === id);

  it('SESSION_TTL_S is the default, null keeps a session for ever', async () => {
    const d = await h.api.post('/v1/sessions', { input: 'x', start: false });
    assert.equal(d.body.ttl_s, 86400);
    assert.equal(Date.parse(d.body.expires_at), Date.parse(d.body.updated_at) + 86_400_000);
    const f = await h.api.post('/v1/sessions', { input: 'x', start: false, ttl_s: null });
    assert.equal(f.body.ttl_s, null);
    assert.equal(f.body.expires_at, null);
  });

  it('an idle session not changed for ttl_s is deleted with every key, after session.deleted (webhook)', async () => {
    h.fake.enqueue(text('Hello.'));
    const c = await h.api.post('/v1/sessions', { input: 'Hi', ttl_s: 1, metadata: { job: 'nightly' } });
    assert.equal(c.status, 201, JSON.stringify(c.body));
    const id = c.body.id;
    assert.equal(c.body.expires_at, null, 'not while running');
    const idle = await h.api.waitStatus(id, 'idle');
    assert.equal(Date.parse(idle.expires_at), Date.parse(idle.updated_at) + 1000);
    assert.ok((await sessionKeys(r, id)).length > 0);

    await receiver.until(() => deletedEvent(id) !== undefined);
    assert.equal(deletedEvent(id)!.body.data.reason, 'expired');
    assert.ok(Date.now() >= Date.parse(idle.expires_at));
    assert.equal((await h.api.get(`/v1/sessions/${id}`)).status, 404);
    const list = (await h.api.get('/v1/sessions?limit=100')).body.data.map((s: any) => s.id);
    assert.ok(!list.includes(id), 'out of the tenant index');
    // Every key of the session is gone (the log last, once its `session.deleted` was kept for a moment).
    await until(async () => (await sessionKeys(r, id)).length === 0, `no key of ${id}`);
    assert.equal(await r.zscore('sessions:expiry', id), null);
    assert.deepEqual(
      (await r.zrange('t:{acme}:sessions', 0, -1)).filter((m) => m.endsWith(id)),
      [],
    );
    // And out of the metadata index (`metadata.job=nightly`).
    const [, mdKeys] = await r.scan('0', 'MATCH', 't:{acme}:md:*', 'COUNT', 1000);
    for (const key of mdKeys)
      assert.deepEqual(
        (await r.zrange(key, 0, -1)).filter((m) => m.endsWith(id)),
        [],
        key,
      );
  });

  it("a DELETE's log keeps its session.deleted for DELETED_LOG_TTL_MS, as an expiry's", async () => {
    // Held at 60 s whatever DELETED_LOG_TTL_MS said, it outlived the bound the boot checks WEBHOOK_SWEEP_GRACE_MS by.
    const c = await h.api.post('/v1/sessions', { input: 'Hi', start: false });
    assert.equal(c.status, 201, JSON.stringify(c.body));
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${c.body.id}`)).status, 200);
    const ttl = await r.pttl(`s:{${c.body.id}}:e`);
    assert.ok(ttl > 0 && ttl <= 2000, `the log expires in ${ttl} ms`);
  });

  it('a new message wins over the sweep: the TTL starts again from it', async () => {
    const c = await h.api.post('/v1/sessions', { input: 'Hi', start: false, ttl_s: 1 });
    const id = c.body.id;
    // Messages keep the session changing past its first expiry time; each one restarts the TTL.
    let last = c.body;
    for (let i = 0; i < 4; i++) {
      h.fake.enqueue(text(`Reply ${i}.`));
      const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: `Message ${i}` });
      assert.equal(m.status, 202, `message ${i}: ${JSON.stringify(m.body)}`);
      last = await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === i + 1);
      assert.equal(deletedEvent(id), undefined);
      // Half a TTL later (waiting for the clock, not for an event: the next message must come before expiry).
      await new Promise((res) => setTimeout(res, 500));
    }
    assert.ok(Date.now() > Date.parse(c.body.created_at) + 1000, 'alive past its first expiry');
    await receiver.until(() => deletedEvent(id) !== undefined);
    assert.ok(Date.now() >= Date.parse(last.updated_at) + 1000, 'deleted a TTL after its last change');
  });
});
