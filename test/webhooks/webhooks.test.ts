/**
 * Webhook routes (spec §6.3) on an in-process service: the resource, its secret shown once, tenant isolation,
 * If-Match and Idempotency-Key, bounds, a test delivery verified with the `standardwebhooks` verifier, and the
 * SSRF guard at creation and again at delivery.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { startHarness, type Harness } from '../helpers/service.js';
import { startTestCluster, startTestRedis, type TestCluster, type TestRedis } from '../helpers/redis.js';
import { startService, type Service } from '../../src/boot.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { Api } from '../helpers/service.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { refusedAddress } from '../../src/webhooks/address-guard.js';
import { retryDelay } from '../../src/webhooks/dispatcher.js';
import { SecretBox, parseSecretKey } from '../../src/webhooks/secrets.js';
import { idempotencyKey } from '../../src/store/keys.js';
import { webhookKeys } from '../../src/webhooks/keys.js';
import { Redis } from 'ioredis';

const KEYS = 'acme:key-acme,globex:key-globex,initech:key-initech';

describe('webhook routes', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let h: Harness;
  let acme: Api;
  let globex: Api;
  const receiver = new WebhookReceiver();

  before(async () => {
    redis = await startTestRedis();
    await receiver.start();
    h = await startHarness({
      redis,
      env: {
        API_KEYS: KEYS,
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_MAX_PER_TENANT: '3',
        WEBHOOK_POLL_MS: '50',
        WEBHOOK_SECRET_KEY: Buffer.alloc(32, 7).toString('base64'),
      },
    });
    acme = h.api.as('key-acme');
    globex = h.api.as('key-globex');
  });
  after(async () => {
    await h?.close();
    await receiver.close();
    await redis?.stop();
  });

  it('creates a webhook whose secret is shown only in the answer to its creation', async () => {
    const created = await acme.post('/v1/webhooks', { url: receiver.url, description: 'ops' });
    assert.equal(created.status, 201);
    const w = created.body;
    assert.match(w.id, /^wh_[A-Za-z0-9]+$/);
    assert.match(w.secret, /^whsec_[A-Za-z0-9+/=]+$/);
    assert.deepEqual(w.events, ['session.status']);
    assert.equal(w.url, receiver.url);
    assert.equal(w.disabled, false);
    assert.equal(created.headers.get('etag'), '"1"');
    assert.ok(!Number.isNaN(Date.parse(w.created_at)));

    const got = await acme.get(`/v1/webhooks/${w.id}`);
    assert.equal(got.status, 200);
    assert.equal(got.body.secret, undefined);
    const list = await acme.get('/v1/webhooks');
    assert.deepEqual(
      list.body.data.map((x: any) => [x.id, x.secret]),
      [[w.id, undefined]],
    );
    // At rest the secret is sealed with WEBHOOK_SECRET_KEY, not stored as it was shown.
    const stored = await h.service.app.redis.hget(`wh:{${w.id}}`, 'secret');
    assert.ok(stored?.startsWith('enc1:'));
    assert.notEqual(stored, w.secret);
    await acme.req('DELETE', `/v1/webhooks/${w.id}`);
  });

  it("answers 404 webhook_not_found for another tenant's webhook", async () => {
    const w = (await acme.post('/v1/webhooks', { url: receiver.url })).body;
    for (const [method, path, body] of [
      ['GET', `/v1/webhooks/${w.id}`],
      ['PATCH', `/v1/webhooks/${w.id}`, { description: 'x' }],
      ['DELETE', `/v1/webhooks/${w.id}`],
      ['GET', `/v1/webhooks/${w.id}/deliveries`],
      ['POST', `/v1/webhooks/${w.id}/test`, {}],
    ] as const) {
      const r = await globex.req(method, path, body);
      assert.equal(r.status, 404, `${method} ${path}`);
      assert.equal(r.body.error.code, 'webhook_not_found');
    }
    assert.deepEqual((await globex.get('/v1/webhooks')).body.data, []);
    assert.equal((await acme.get(`/v1/webhooks/${w.id}`)).status, 200);
    assert.equal((await h.api.as('').get('/v1/webhooks')).status, 401);
    await acme.req('DELETE', `/v1/webhooks/${w.id}`);
  });

  it('honours If-Match and Idempotency-Key like the session routes', async () => {
    const first = await acme.post('/v1/webhooks', { url: receiver.url }, { 'idempotency-key': 'k1' });
    const again = await acme.post('/v1/webhooks', { url: receiver.url }, { 'idempotency-key': 'k1' });
    assert.equal(again.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(again.body, first.body, 'the replay shows the secret too');
    // The idempotency record (kept for IDEMPOTENCY_TTL_S) holds the secret sealed, as the webhook does at rest.
    const r = h.service.app.redis;
    const record = await r.get(idempotencyKey('acme', createHash('sha256').update('k1').digest('base64url')));
    assert.ok(record && !record.includes(first.body.secret), 'no secret in clear in the record');
    assert.match(JSON.parse(record).sealed.secret, /^enc1:/);
    const other = await acme.post(
      '/v1/webhooks',
      { url: receiver.url, events: ['session.error'] },
      { 'idempotency-key': 'k1' },
    );
    assert.equal(other.status, 422);
    assert.equal(other.body.error.code, 'idempotency_key_reused');
    assert.equal((await acme.get('/v1/webhooks')).body.data.length, 1);

    const id = first.body.id as string;
    const stale = await acme.req('PATCH', `/v1/webhooks/${id}`, { description: 'a' }, { 'if-match': '"7"' });
    assert.equal(stale.status, 412);
    assert.equal(stale.body.error.code, 'revision_mismatch');
    const patched = await acme.req(
      'PATCH',
      `/v1/webhooks/${id}`,
      { events: ['session.status', 'turn.completed'], disabled: true },
      { 'if-match': '"1"' },
    );
    assert.equal(patched.status, 200);
    assert.equal(patched.headers.get('etag'), '"2"');
    assert.deepEqual(patched.body.events, ['session.status', 'turn.completed']);
    assert.equal(patched.body.disabled, true);
    const test = await acme.post(`/v1/webhooks/${id}/test`);
    assert.equal(test.status, 409);
    assert.equal(test.body.error.code, 'webhook_disabled');
    const staleDelete = await acme.req('DELETE', `/v1/webhooks/${id}`, undefined, { 'if-match': '"1"' });
    assert.equal(staleDelete.status, 412);
    const deleted = await acme.req('DELETE', `/v1/webhooks/${id}`, undefined, { 'if-match': '"2"' });
    assert.deepEqual(deleted.body, { id, object: 'webhook', deleted: true });
    assert.equal((await acme.get(`/v1/webhooks/${id}`)).status, 404);
  });

  it('bounds what a client controls', async () => {
    const long = await acme.post('/v1/webhooks', { url: `${receiver.url}?${'a'.repeat(2100)}` });
    assert.equal(long.status, 400);
    assert.equal(long.body.error.code, 'invalid_webhook_url', 'longer than 2048 characters (the contract)');
    const unknown = await acme.post('/v1/webhooks', { url: receiver.url, events: ['session.exploded'] });
    assert.equal(unknown.status, 400);
    assert.equal(unknown.body.error.code, 'invalid_request');
    const twice = await acme.post('/v1/webhooks', {
      url: receiver.url,
      events: ['session.status', 'session.status'],
    });
    assert.equal(twice.status, 400);
    const extra = await acme.post('/v1/webhooks', { url: receiver.url, secret: 'mine' });
    assert.equal(extra.status, 400);
    for (const url of ['ftp://127.0.0.1/x', 'not a url', 'http://user:pw@127.0.0.1/x', '']) {
      const r = await acme.post('/v1/webhooks', { url });
      assert.equal(r.status, 400, url);
      assert.equal(r.body.error.code, 'invalid_webhook_url', url);
    }
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await acme.post('/v1/webhooks', { url: receiver.url })).body.id);
    const over = await acme.post('/v1/webhooks', { url: receiver.url });
    assert.equal(over.status, 429);
    assert.equal(over.body.error.code, 'quota_exceeded');
    assert.equal((await globex.post('/v1/webhooks', { url: receiver.url })).status, 201, 'per tenant');
    for (const id of ids) await acme.req('DELETE', `/v1/webhooks/${id}`);
  });

  it('delivers a signed test event and logs the attempt', async () => {
    const w = (await acme.post('/v1/webhooks', { url: receiver.url })).body;
    receiver.setSecret(w.secret);
    // It takes no body, as the other body-less POSTs: none, null or {} (anything else is 400, nothing queued).
    for (const body of [{ x: 1 }, 'x', 123])
      assert.equal((await acme.post(`/v1/webhooks/${w.id}/test`, body)).status, 400, JSON.stringify(body));
    const sent = await acme.post(`/v1/webhooks/${w.id}/test`);
    assert.equal(sent.status, 202);
    await receiver.until(() => receiver.accepted.some((r) => r.id === sent.body.message_id));
    const got = receiver.accepted.find((r) => r.id === sent.body.message_id)!;
    assert.equal(got.body.type, 'webhook.test');
    assert.deepEqual(got.body.data, { webhook_id: w.id });
    assert.equal(receiver.invalid, 0);
    const log = await until(async () => {
      const r = await acme.get(`/v1/webhooks/${w.id}/deliveries`);
      return r.body.data.length ? r.body.data : null;
    });
    assert.equal(log[0].message_id, sent.body.message_id);
    assert.equal(log[0].status_code, 204);
    assert.equal(log[0].outcome, 'delivered');
    assert.equal(log[0].attempt, 1);
    // And counted by outcome in /metrics (right after the settle that wrote the log).
    await until(async () =>
      /^trs_webhook_deliveries_total\{outcome="delivered"\} [1-9]/m.test(
        String((await h.api.get('/metrics')).body),
      )
        ? true
        : null,
    );
    await acme.req('DELETE', `/v1/webhooks/${w.id}`);
  });

  it('delivers session.status events of a session', async () => {
    const w = (await acme.post('/v1/webhooks', { url: receiver.url })).body;
    receiver.setSecret(w.secret);
    const s = (await acme.post('/v1/sessions', { input: 'hello' })).body;
    await acme.waitStatus(s.id, 'idle');
    const events = (await acme.get(`/v1/sessions/${s.id}/events?limit=1000`)).body.data.filter(
      (e: any) => e.type === 'session.status',
    );
    assert.ok(events.length >= 1);
    const want = events.map((e: any) => `msg_${s.id}_${e.id}`).sort();
    await receiver.until(() => want.every((id: string) => receiver.accepted.some((r) => r.id === id)));
    const got = receiver.accepted.filter((r) => r.body.session_id === s.id);
    assert.deepEqual(got.map((r) => r.id).sort(), want);
    assert.ok(got.every((r) => r.body.type === 'session.status'));
    assert.deepEqual(got.find((r) => r.id === want.at(-1)) && events.at(-1).data.status, 'idle');
    await acme.req('DELETE', `/v1/webhooks/${w.id}`);
  });

  it("marks no session of a tenant without webhooks, from the session's first write on", async () => {
    // acme listens for session.status; initech never had a webhook. The create knows its tenant, so the tap skips
    // initech's session (no mark, no tenant lookup) and marks acme's, before the write it covers.
    const w = (await acme.post('/v1/webhooks', { url: receiver.url })).body;
    receiver.setSecret(w.secret);
    // The interest cache follows the change by pub/sub: wait until this process's tap sees it.
    await until(async () => h.service.app.webhooks.listens('acme', 'session.status') || null);
    const r = h.service.app.redis;
    const theirs = (await h.api.as('key-initech').post('/v1/sessions', { start: false })).body;
    const ours = (await acme.post('/v1/sessions', { start: false })).body;
    assert.equal(await r.zscore('wh:marks', theirs.id), null, "initech's session is not marked");
    assert.notEqual(await r.zscore('wh:marks', ours.id), null, "acme's session is marked");
    await acme.req('DELETE', `/v1/webhooks/${w.id}`);
  });

  it("keeps the tenant's index true to the webhook when a writer holding an older record writes last", async () => {
    // The dispatcher disabling an endpoint reindexes from the record it loaded; a PATCH enabling it in between
    // bumps the revision and reindexes first. The stale write must not stick.
    const { store } = h.service.app.webhooks;
    const r = h.service.app.redis;
    const w = (await acme.post('/v1/webhooks', { url: receiver.url })).body;
    const before = (await store.load(w.id))!;
    await acme.req('PATCH', `/v1/webhooks/${w.id}`, { description: 'newer' });
    await store.reindex({ ...before, disabled: true });
    const entry = JSON.parse((await r.hget('wht:{acme}', w.id))!);
    assert.equal(entry.disabled, false);
    // A write for a webhook deleted meanwhile leaves no entry (it would count against the tenant's limit).
    await acme.req('DELETE', `/v1/webhooks/${w.id}`);
    await store.reindex(before);
    assert.equal(await r.hexists('wht:{acme}', w.id), 0);
  });
});

describe('events written by a replica that died before fanning them out', { timeout: 60_000 }, () => {
  let h: Harness;
  const receiver = new WebhookReceiver();
  before(async () => {
    await receiver.start();
    h = await startHarness({
      env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_POLL_MS: '50', WEBHOOK_SWEEP_GRACE_MS: '1000' },
    });
  });
  after(async () => {
    await h?.close();
    await receiver.close();
  });

  it('are delivered by the sweep of the session mark', async () => {
    const w = (await h.api.post('/v1/webhooks', { url: receiver.url })).body;
    receiver.setSecret(w.secret);
    // What a replica leaves when SIGKILLed between its event write and its fan-out: the mark (sent before the
    // write) and the event in the session's log, no message in any outbox.
    const r = h.service.app.redis;
    const id = 'ses_markedbydead1';
    await r.hset(`s:{${id}}`, 'id', id, 'tenant', 'default', 'status', 'idle');
    await r.zadd('wh:marks', Date.now(), id);
    const eventId = await r.xadd(
      `s:{${id}}:e`,
      '*',
      't',
      'session.status',
      'd',
      '{"status":"idle","required_action":null,"stop_reason":"end_turn","error":null}',
      'r',
      '3',
      'at',
      String(Date.now()),
    );
    await receiver.until(() => receiver.accepted.some((x) => x.id === `msg_${id}_${eventId}`));
    const got = receiver.accepted.find((x) => x.id === `msg_${id}_${eventId}`)!;
    assert.equal(got.body.session_id, id);
    assert.equal(got.body.type, 'session.status');
    assert.equal(got.body.data.status, 'idle');
    // The mark is dropped once a sweep read the log a grace period after it.
    await until(async () => ((await r.zscore('wh:marks', id)) === null ? true : null));
  });
});

describe('an endpoint that keeps failing', { timeout: 60_000 }, () => {
  let h: Harness;
  const receiver = new WebhookReceiver();
  before(async () => {
    await receiver.start();
    h = await startHarness({
      env: {
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_POLL_MS: '50',
        WEBHOOK_RETRY_BASE_MS: '20',
        WEBHOOK_RETRY_MAX_MS: '100',
        // Stands for the 24 hours of the contract, both for a message's retries and for disabling the endpoint:
        // the message keeps failing, so it disables the endpoint however slow the machine (see settle.lua). Many
        // retry delays (at most 100 ms) fit in it, so "retried" holds unless an attempt takes over a second.
        WEBHOOK_RETRY_FOR_MS: '3000',
      },
    });
  });
  after(async () => {
    await h?.close();
    await receiver.close();
  });

  it('is retried with the same webhook-id, then disabled; PATCH enables it again', async () => {
    receiver.mode = 'fail';
    const w = (await h.api.post('/v1/webhooks', { url: receiver.url })).body;
    receiver.setSecret(w.secret);
    const sent = (await h.api.post(`/v1/webhooks/${w.id}/test`)).body;
    const disabled = await until(async () => {
      const r = await h.api.get(`/v1/webhooks/${w.id}`);
      return r.body.disabled ? r.body : null;
    });
    assert.ok(disabled.failing_since);
    // The disable is a change of the webhook: a new revision, and updated_at with it.
    assert.equal(disabled.revision, w.revision + 1);
    assert.ok(Date.parse(disabled.updated_at) > Date.parse(w.updated_at), JSON.stringify(disabled));
    const log = (await h.api.get(`/v1/webhooks/${w.id}/deliveries?limit=100`)).body.data;
    assert.equal(log[0].outcome, 'disabled');
    assert.ok(log.length >= 3, 'retried');
    assert.ok(
      log.slice(1).every((e: any) => e.outcome === 'retrying'),
      'never given up before the endpoint is disabled',
    );
    // Failing since the first attempt was claimed, not since it settled.
    assert.ok(Date.parse(disabled.failing_since) <= Date.parse(log.at(-1).at));
    assert.ok(log.every((e: any) => e.message_id === sent.message_id && e.status_code === 500));
    assert.deepEqual(
      log.map((e: any) => e.attempt),
      log.map((_: unknown, i: number) => log.length - i),
      'attempts counted up, newest first',
    );
    const refused = await h.api.post(`/v1/webhooks/${w.id}/test`);
    assert.equal(refused.body.error.code, 'webhook_disabled');

    receiver.mode = 'accept';
    const enabled = await h.api.req('PATCH', `/v1/webhooks/${w.id}`, { disabled: false });
    assert.equal(enabled.body.disabled, false);
    assert.equal(enabled.body.failing_since, null);
    const again = (await h.api.post(`/v1/webhooks/${w.id}/test`)).body;
    await receiver.until(() => receiver.accepted.some((r) => r.id === again.message_id));
  });
});

describe("an endpoint's outbox", { timeout: 60_000 }, () => {
  let h: Harness;
  const receiver = new WebhookReceiver();
  before(async () => {
    await receiver.start();
    h = await startHarness({
      env: {
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_POLL_MS: '50',
        // A failed attempt waits long: what is pending stays pending while the test looks.
        WEBHOOK_RETRY_BASE_MS: '60000',
        WEBHOOK_RETRY_MAX_MS: '60000',
        WEBHOOK_MAX_PENDING_BYTES: '65536',
      },
    });
  });
  after(async () => {
    await h?.close();
    await receiver.close();
  });

  it('is bounded in bytes (WEBHOOK_MAX_PENDING_BYTES): past it events are dropped; delivered ones give theirs back', async () => {
    const redis = new Redis(h.redis.url);
    try {
      receiver.mode = 'fail';
      const w = (await h.api.post('/v1/webhooks', { url: receiver.url, events: ['session.created'] })).body;
      receiver.setSecret(w.secret);
      const keys = webhookKeys(w.id);
      // Each session.created carries its 25 kB system prompt: two fit in 64 KiB, the third does not.
      for (let i = 0; i < 3; i++)
        assert.equal(
          (await h.api.post('/v1/sessions', { start: false, system: `${i}`.repeat(25_000) })).status,
          201,
        );
      await until(async () => ((await redis.hlen(keys.payloads)) === 2 ? true : null));
      const pending = Object.values(await redis.hgetall(keys.payloads));
      const bytes = Number(await redis.hget(keys.meta, 'pending_bytes'));
      assert.equal(
        bytes,
        pending.reduce((n, b) => n + Buffer.byteLength(b), 0),
      );
      assert.ok(bytes <= 65_536, String(bytes));

      receiver.mode = 'accept';
      const ok = (await h.api.post('/v1/webhooks', { url: receiver.url, events: ['session.created'] })).body;
      receiver.setSecret(ok.secret);
      await h.api.post('/v1/sessions', { start: false, system: 'x'.repeat(25_000) });
      await until(async () => (receiver.accepted.length >= 1 ? true : null));
      await until(async () => ((await redis.hlen(webhookKeys(ok.id).payloads)) === 0 ? true : null));
      assert.equal(await redis.hget(webhookKeys(ok.id).meta, 'pending_bytes'), '0');
    } finally {
      redis.disconnect();
    }
  });
});

describe('webhooks on a Redis Cluster', { timeout: 120_000 }, () => {
  let cluster: TestCluster;
  let fake: FakeAnthropic;
  let service: Service;
  const receiver = new WebhookReceiver();
  before(async () => {
    [cluster, fake] = await Promise.all([
      startTestCluster(3),
      startFakeAnthropic({ strictAlternation: true }),
    ]);
    await receiver.start();
    service = await startService({
      PORT: '0',
      HOST: '127.0.0.1',
      REDIS_CLUSTER_NODES: cluster.nodes.map((n) => `${n.host}:${n.port}`).join(','),
      REDIS_KEY_PREFIX: 'none',
      ANTHROPIC_API_KEY: 'test-key',
      ANTHROPIC_BASE_URL: fake.url,
      LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'silent',
      WEBHOOK_ALLOW_PRIVATE: 'true',
      WEBHOOK_POLL_MS: '50',
    });
  });
  after(async () => {
    await service?.close();
    await receiver.close();
    await fake?.close();
    await cluster?.stop();
  });

  it('delivers every session.status event (no script crosses slots)', async () => {
    const api = new Api(service.url);
    const w = (await api.post('/v1/webhooks', { url: receiver.url })).body;
    receiver.setSecret(w.secret);
    const s = (await api.post('/v1/sessions', { input: 'hello' })).body;
    await api.waitStatus(s.id, 'idle');
    const want = (await api.get(`/v1/sessions/${s.id}/events?limit=1000`)).body.data
      .filter((e: any) => e.type === 'session.status')
      .map((e: any) => `msg_${s.id}_${e.id}`);
    await receiver.until(() => want.every((id: string) => receiver.accepted.some((r) => r.id === id)));
    assert.equal(receiver.invalid, 0);
    const sent = await api.post(`/v1/webhooks/${w.id}/test`);
    await receiver.until(() => receiver.accepted.some((r) => r.id === sent.body.message_id));
    assert.equal((await api.req('PATCH', `/v1/webhooks/${w.id}`, { disabled: true })).status, 200);
    assert.equal((await api.req('DELETE', `/v1/webhooks/${w.id}`)).status, 200);
  });
});

describe('SSRF guard', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let open: Harness;
  let guarded: Harness;
  const receiver = new WebhookReceiver();

  before(async () => {
    redis = await startTestRedis();
    await receiver.start();
    // Two services on one Redis: one that allows private targets, one that does not.
    [open, guarded] = await Promise.all([
      startHarness({ redis, env: { WEBHOOK_ALLOW_PRIVATE: 'true', WEBHOOK_POLL_MS: '50' } }),
      startHarness({ redis, env: { WEBHOOK_POLL_MS: '50' } }),
    ]);
  });
  after(async () => {
    await Promise.all([open?.close(), guarded?.close()]);
    await receiver.close();
    await redis?.stop();
  });

  it('refuses loopback, private, link-local, metadata and mapped addresses, and names resolving to them', async () => {
    for (const url of [
      'http://127.0.0.1/hook',
      'http://127.8.9.10:8080/hook',
      'http://10.0.0.1/hook',
      'http://192.168.1.1/hook',
      'http://172.16.0.1/hook',
      'http://169.254.169.254/latest/meta-data',
      'http://[::1]/hook',
      'http://[::ffff:127.0.0.1]/hook',
      'http://[::ffff:a00:1]/hook',
      'http://[fe80::1]/hook',
      'http://[fd00::1]/hook',
      'http://0.0.0.0/hook',
      'http://[::]/hook',
      'http://2130706433/hook',
      'http://0x7f.1/hook',
      'http://localhost:3000/hook',
      'http://100.64.0.1/hook',
    ]) {
      const r = await guarded.api.post('/v1/webhooks', { url });
      assert.equal(r.status, 400, url);
      assert.equal(r.body.error.code, 'invalid_webhook_url', url);
    }
    const patched = await guarded.api.req('PATCH', '/v1/webhooks/wh_none', { url: 'http://10.0.0.1/' });
    assert.equal(patched.status, 400);
    assert.equal(patched.body.error.code, 'invalid_webhook_url');
    assert.equal((await open.api.post('/v1/webhooks', { url: receiver.url })).status, 201);
  });

  it('checks the address again at delivery time', async () => {
    // Stored through the service that allows private targets; delivered by the one that does not.
    const w = (await open.api.post('/v1/webhooks', { url: receiver.url })).body;
    await open.close();
    const sent = await guarded.api.post(`/v1/webhooks/${w.id}/test`);
    assert.equal(sent.status, 202);
    const log = await until(async () => {
      const r = await guarded.api.get(`/v1/webhooks/${w.id}/deliveries`);
      return r.body.data.length ? r.body.data : null;
    });
    assert.equal(log[0].status_code, null);
    assert.match(log[0].error, /^refused: .*127\.0\.0\.1 \(loopback\)/);
    assert.equal(log[0].outcome, 'retrying');
    assert.equal(receiver.requests, 0);
  });

  it('classifies addresses', () => {
    for (const a of [
      '127.0.0.1',
      '10.1.2.3',
      '169.254.169.254',
      '::1',
      '::ffff:8.8.8.8',
      'fd00:ec2::254',
      '0.0.0.0',
    ])
      assert.notEqual(refusedAddress(a), null, a);
    for (const a of ['8.8.8.8', '2606:4700:4700::1111', '93.184.216.34'])
      assert.equal(refusedAddress(a), null, a);
  });
});

describe('webhook helpers', () => {
  it('backs off exponentially with jitter, capped', () => {
    assert.equal(retryDelay(1, 1000, 60_000, 0), 500);
    assert.equal(retryDelay(1, 1000, 60_000, 1), 1000);
    assert.equal(retryDelay(4, 1000, 60_000, 1), 8000);
    assert.equal(retryDelay(30, 1000, 60_000, 1), 60_000);
    assert.ok(retryDelay(3, 1000, 60_000) >= 2000 && retryDelay(3, 1000, 60_000) <= 4000);
  });

  it('seals secrets with AES-GCM and opens them only with the key', () => {
    const box = new SecretBox(parseSecretKey(Buffer.alloc(32, 1).toString('hex')));
    const sealed = box.seal('whsec_abc');
    assert.ok(sealed.startsWith('enc1:'));
    assert.equal(box.open(sealed), 'whsec_abc');
    assert.throws(() => new SecretBox(parseSecretKey(Buffer.alloc(32, 2).toString('hex'))).open(sealed));
    assert.throws(() => new SecretBox(undefined).open(sealed));
    assert.equal(new SecretBox(undefined).seal('whsec_abc'), 'whsec_abc');
    assert.throws(() => parseSecretKey('short'));
  });
});

/** Resolves with `fn`'s first non-null value, polled; the test's own timeout bounds the wait, not a deadline here. */
async function until<T>(fn: () => Promise<T | null>): Promise<T> {
  for (;;) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('a webhook disabled, then enabled again', { timeout: 120_000 }, () => {
  let h: Harness;
  const receiver = new WebhookReceiver();
  before(async () => {
    await receiver.start();
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-acme',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        WEBHOOK_POLL_MS: '50',
        WEBHOOK_RETRY_BASE_MS: '500',
        WEBHOOK_RETRY_MAX_MS: '500',
        WEBHOOK_MAX_PENDING: '1',
      },
    });
  });
  after(async () => {
    await h?.close();
    await receiver.close();
  });

  it('delivers what its outbox kept once enabled; a test event past a full outbox is 429', async () => {
    const acme = h.api.as('key-acme');
    const redis = h.service.app.redis;
    const w = (await acme.post('/v1/webhooks', { url: receiver.url })).body;
    receiver.setSecret(w.secret);
    receiver.mode = 'fail';
    assert.equal((await acme.post(`/v1/webhooks/${w.id}/test`, {})).status, 202);
    await receiver.until(() => receiver.requests >= 1);
    assert.equal((await acme.req('PATCH', `/v1/webhooks/${w.id}`, { disabled: true })).status, 200);
    // The retry comes due; the claim finds the endpoint disabled and takes it out of the due set.
    for (const deadline = Date.now() + 20_000; (await redis.zscore('wh:due', w.id)) !== null;) {
      assert.ok(Date.now() < deadline, 'the disabled endpoint left the due set');
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    receiver.mode = 'accept';
    assert.equal((await acme.req('PATCH', `/v1/webhooks/${w.id}`, { disabled: false })).status, 200);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      receiver.until(() => receiver.accepted.length >= 1),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('the kept event was never delivered')), 20_000);
      }),
    ]).finally(() => clearTimeout(timer));
    // The outbox keeps 1 undelivered event: one held in flight, the next test event is refused, not lost silently.
    receiver.mode = 'hang';
    assert.equal((await acme.post(`/v1/webhooks/${w.id}/test`, {})).status, 202);
    const full = await acme.post(`/v1/webhooks/${w.id}/test`, {});
    assert.equal(full.status, 429, JSON.stringify(full.body));
    assert.equal(full.body.error.code, 'quota_exceeded');
    assert.equal(full.body.error.details.quota, 'WEBHOOK_MAX_PENDING');
    receiver.releaseHeld();
  });
});
