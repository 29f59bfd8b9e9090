/**
 * Issue 22 item 3: Redis out of memory. A real redis-server whose maxmemory is reached (noeviction): writes answer
 * 503 `store_unavailable` with Retry-After (not 500), /readyz is not ready while Redis refuses writes, and a DELETE
 * of a session still works (with the script cache flushed, too). Then the per-tenant storage quota TENANT_MAX_BYTES:
 * 429 `quota_exceeded` `storage_bytes`, counted in Redis (so across replicas), given back by a delete; a session's
 * client tokens and their events count in it too.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { sessionKeys } from '../../src/store/keys.js';
import { storageKey } from '../../src/store/storage-quota.js';
import { until } from '../durability/chaos-lib.js';

describe('Redis full', { timeout: 60_000 }, () => {
  let redis: TestRedis;
  let h: Harness;
  let acme: Api;
  let admin: Redis;

  before(async () => {
    redis = await startTestRedis({ appendonly: false });
    admin = new Redis(redis.url);
    h = await startHarness({ redis, env: { API_KEYS: 'acme:key-acme' } });
    acme = h.api.as('key-acme');
  });
  after(async () => {
    await admin?.config('SET', 'maxmemory', '0');
    admin?.disconnect();
    await h?.close();
    await redis?.stop();
  });

  /**
   * Redis full: maxmemory set to half of what is used now (noeviction), so Redis refuses every write however the
   * used memory moves by a few kilobytes while the test runs (a limit just above the used memory flaked: any freed
   * buffer let the next write through). Checked with one write of the test's own.
   */
  async function fill(): Promise<void> {
    const info = await admin.info('memory');
    const used = Number(/used_memory:(\d+)/.exec(info)![1]);
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', String(Math.max(1, Math.floor(used / 2))));
    await assert.rejects(admin.set('junk', 'j'.repeat(100_000)), /OOM/);
  }

  it('answers 503 store_unavailable with Retry-After, is not ready, and still deletes', async () => {
    const kept = (await acme.post('/v1/sessions', { start: false })).body;
    const other = (await acme.post('/v1/sessions', { start: false })).body;
    assert.equal((await h.api.get('/readyz')).status, 200);
    await fill();

    const created = await acme.post('/v1/sessions', { start: false, params: { system: 'x'.repeat(10_000) } });
    assert.equal(created.status, 503);
    assert.equal(created.body.error.code, 'store_unavailable');
    assert.ok(Number(created.headers.get('retry-after')) > 0);
    const posted = await acme.post(`/v1/sessions/${kept.id}/messages`, { content: 'hello' });
    assert.equal(posted.status, 503);
    assert.equal(posted.body.error.code, 'store_unavailable');

    const ready = await h.api.get('/readyz');
    assert.equal(ready.status, 503);
    assert.equal(ready.body.status, 'not_ready');
    assert.ok(ready.headers.get('retry-after'));
    // Reads still work.
    assert.equal((await acme.get(`/v1/sessions/${kept.id}`)).status, 200);

    // A delete frees memory: it works when Redis is full, with the script in the cache and without it.
    assert.equal((await acme.req('DELETE', `/v1/sessions/${kept.id}`)).status, 200);
    await admin.script('FLUSH');
    assert.equal((await acme.req('DELETE', `/v1/sessions/${other.id}`)).status, 200);
    assert.equal((await acme.get(`/v1/sessions/${kept.id}`)).status, 404);
    assert.equal((await acme.get(`/v1/sessions/${other.id}`)).status, 404);

    await admin.config('SET', 'maxmemory', '0');
    assert.equal((await h.api.get('/readyz')).status, 200);
    assert.equal((await acme.post('/v1/sessions', { start: false })).status, 201);
  });

  it('revokes a client token when Redis is full (its counter not written does not fail the revoke)', async () => {
    const id = (await acme.post('/v1/sessions', { start: false })).body.id as string;
    const minted = await acme.post('/v1/client-tokens', { session_id: id, scopes: ['read'] });
    assert.equal(minted.status, 201);
    const client = h.api.as(minted.body.token);
    assert.equal((await client.get(`/v1/sessions/${id}`)).status, 200);
    await fill();
    try {
      const revoked = await acme.req('DELETE', `/v1/client-tokens/${minted.body.id}`);
      assert.equal(revoked.status, 200, JSON.stringify(revoked.body));
      assert.equal((await client.get(`/v1/sessions/${id}`)).status, 401);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
  });
});

describe('TENANT_MAX_BYTES', { timeout: 60_000 }, () => {
  let h: Harness;
  let a: Harness;

  before(async () => {
    const env = { API_KEYS: 'acme:key-acme,globex:key-globex', TENANT_MAX_BYTES: '400000' };
    h = await startHarness({ env });
    // A second replica on the same Redis: the count is shared.
    a = await startHarness({ env, redis: h.redis, fakeServer: h.fake });
  });
  after(async () => {
    await a?.close();
    await h?.close();
  });

  it('refuses writes past the quota with 429 storage_bytes, across replicas, and a delete gives the bytes back', async () => {
    const system = 's'.repeat(60_000);
    const r1 = h.api.as('key-acme');
    const r2 = a.api.as('key-acme');
    const ids: string[] = [];
    let refused: any;
    for (let i = 0; i < 6 && !refused; i++) {
      const r = await (i % 2 ? r2 : r1).post('/v1/sessions', { start: false, params: { system } });
      if (r.status === 201) ids.push(r.body.id);
      else refused = r;
    }
    assert.ok(refused, 'never refused');
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.code, 'quota_exceeded');
    assert.equal(refused.body.error.details.quota, 'storage_bytes');
    assert.equal(refused.body.error.details.limit, 400_000);
    assert.ok(ids.length >= 2 && ids.length <= 4, `${ids.length} created`);
    // A follow-up adds bytes too.
    const big = await r2.post(`/v1/sessions/${ids[0]}/messages`, { content: 'm'.repeat(90_000) });
    assert.equal(big.status, 429);
    // Another tenant is not counted with acme.
    assert.equal(
      (await h.api.as('key-globex').post('/v1/sessions', { start: false, params: { system } })).status,
      201,
    );
    // A delete (on the other replica) gives the bytes back.
    assert.equal((await r2.req('DELETE', `/v1/sessions/${ids[0]}`)).status, 200);
    assert.equal((await r1.post('/v1/sessions', { start: false, params: { system } })).status, 201);
  });
});

describe("TENANT_MAX_BYTES: a session's client tokens", { timeout: 60_000 }, () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-acme', TENANT_MAX_BYTES: '100000' } });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  it('count their records and events: a mint over the quota is refused, a revoke never; a delete gives all back', async () => {
    const acme = h.api.as('key-acme');
    const used = async () => Number((await r.get(storageKey('acme'))) ?? 0);
    const id = (await acme.post('/v1/sessions', { start: false })).body.id as string;
    const k = sessionKeys(id);
    const inSession = async () => Number(await r.hget(k.meta, 'bytes'));
    const mint = () =>
      acme.post('/v1/client-tokens', { session_id: id, scopes: ['read'], subject: 'u'.repeat(256) });
    const b0 = await used();
    const s0 = await inSession();
    const t1 = await mint();
    assert.equal(t1.status, 201, JSON.stringify(t1.body));
    // The record and its `client_token.created` event, each holding the subject: in the session's bytes and the tenant's.
    const b1 = await used();
    assert.ok(b1 - b0 > 2 * 256, `${b1 - b0} bytes counted for a mint`);
    assert.equal((await inSession()) - s0, b1 - b0);
    // A revoke gives the record back; its event and the mint's stay counted (the log keeps them).
    assert.equal((await acme.req('DELETE', `/v1/client-tokens/${t1.body.id}`)).status, 200);
    const b2 = await used();
    assert.ok(b2 > b0 && b1 - b2 > 256, `${b0} ${b1} ${b2}`);
    assert.equal((await inSession()) - s0, b2 - b0);
    // A token whose hash expired (its last record did) gives its record back at the session's next mint.
    const t2 = await mint();
    assert.equal(t2.status, 201);
    const b3 = await used();
    assert.equal(b3 - b2, b1 - b0);
    await r.pexpire(k.tokens, 1);
    await until(async () => (await r.exists(k.tokens)) === 0, 5_000, 'the tokens hash expired');
    const t3 = await mint();
    assert.equal(t3.status, 201);
    const b4 = await used();
    assert.ok(b4 - b3 < b1 - b0 - 256, `${b4 - b3} bytes counted, ${b1 - b0} for a mint`);
    // Fill the tenant up: then a mint is refused as a create is.
    const ids = [id];
    for (;;) {
      const c = await acme.post('/v1/sessions', { start: false, params: { system: 's'.repeat(30_000) } });
      if (c.status !== 201) {
        assert.equal(c.status, 429);
        assert.deepEqual(c.body.error.details, { quota: 'storage_bytes', limit: 100_000 });
        break;
      }
      ids.push(c.body.id);
    }
    // What is left (less than a create's 30 kB) takes a few mints of ~1 kB, each counted, then none.
    let over = await mint();
    for (let i = 0; i < 60 && over.status === 201; i++) over = await mint();
    assert.equal(over.status, 429, JSON.stringify(over.body));
    assert.equal(over.body.error.code, 'quota_exceeded');
    assert.deepEqual(over.body.error.details, { quota: 'storage_bytes', limit: 100_000 });
    assert.ok((await used()) <= 100_000, `${await used()} bytes counted`);
    // A revoke frees a credential: never refused.
    assert.equal((await acme.req('DELETE', `/v1/client-tokens/${t3.body.id}`)).status, 200);
    // Deleting the sessions gives back every byte counted: their tokens' and their events' too.
    for (const s of ids) assert.equal((await acme.req('DELETE', `/v1/sessions/${s}`)).status, 200);
    assert.equal(await used(), 0);
  });

  it('a mint refused for storage first releases the records of tokens gone since, then counts again', async () => {
    const acme = h.api.as('key-acme');
    const used = async () => Number((await r.get(storageKey('acme'))) ?? 0);
    const b0 = await used();
    const id = (await acme.post('/v1/sessions', { start: false })).body.id as string;
    const ids = [id];
    const mint = () =>
      acme.post('/v1/client-tokens', { session_id: id, scopes: ['read'], subject: 'u'.repeat(256) });
    for (;;) {
      const c = await acme.post('/v1/sessions', { start: false, params: { system: 's'.repeat(30_000) } });
      if (c.status !== 201) break;
      ids.push(c.body.id);
    }
    let minted = 0;
    let over = await mint();
    for (; minted < 60 && over.status === 201; minted++) over = await mint();
    assert.equal(over.status, 429, JSON.stringify(over.body));
    assert.ok(minted >= 2, `${minted} minted`);
    const full = await used();
    // Every token of the session expires with its hash: nothing but the session's next mint gave their bytes back.
    await r.pexpire(sessionKeys(id).tokens, 1);
    await until(async () => (await r.exists(sessionKeys(id).tokens)) === 0, 5_000, 'the tokens hash expired');
    const again = await mint();
    assert.equal(again.status, 201, JSON.stringify(again.body));
    assert.ok((await used()) < full, `${await used()} bytes counted, ${full} before`);
    for (const s of ids) assert.equal((await acme.req('DELETE', `/v1/sessions/${s}`)).status, 200);
    assert.equal(await used(), b0);
  });

  it("a revoke that lands while the session's delete runs is given back once", async () => {
    const acme = h.api.as('key-acme');
    const used = async () => Number((await r.get(storageKey('acme'))) ?? 0);
    const b0 = await used();
    const id = (await acme.post('/v1/sessions', { start: false })).body.id as string;
    const t = await acme.post('/v1/client-tokens', {
      session_id: id,
      scopes: ['read'],
      subject: 'u'.repeat(256),
    });
    assert.equal(t.status, 201);
    // The delete has begun (whatever it reads before its script is read) when the revoke lands, just before the
    // script: the revoke gives the record's bytes back, and the delete must not give them back again.
    const redis = (h.service.app.store as any).redis;
    const destroy = redis.sessDestroy;
    let revoked = 0;
    redis.sessDestroy = async (...args: unknown[]) => {
      redis.sessDestroy = destroy;
      revoked = (await acme.req('DELETE', `/v1/client-tokens/${t.body.id}`)).status;
      return destroy.apply(redis, args);
    };
    try {
      assert.equal((await acme.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    } finally {
      redis.sessDestroy = destroy;
    }
    assert.equal(revoked, 200);
    assert.equal(await used(), b0);
  });
});
