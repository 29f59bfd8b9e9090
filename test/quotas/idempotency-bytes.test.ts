/**
 * The answers an `Idempotency-Key` keeps count per tenant (IDEMPOTENCY_MAX_BYTES_PER_TENANT): a tenant that keeps
 * creating big sessions with new keys does not fill Redis for everyone; its oldest answers are forgotten first, its
 * newest still replay, and another tenant's are untouched. A forgotten create's key runs the request again, which
 * finds the session it made (a keyed create is named after its key) rather than making a second one.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { idempotencyKey } from '../../src/store/keys.js';

describe('idempotency answers per tenant', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({
      env: { API_KEYS: 'acme:key-a,globex:key-b', IDEMPOTENCY_MAX_BYTES_PER_TENANT: '1048576' },
    });
  });
  after(() => h?.close());

  it('are bounded in bytes: the oldest are forgotten first, the newest replay, another tenant keeps its own', async () => {
    const a = h.api.as('key-a');
    const b = h.api.as('key-b');
    const body = (i: number) => ({ start: false, system: `${i}`.repeat(300_000) });
    const other = await b.post('/v1/sessions', body(9), { 'idempotency-key': 'b-1' });
    assert.equal(other.status, 201);
    // Five answers of ~300 kB each: 1 MiB holds three.
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await a.post('/v1/sessions', body(i), { 'idempotency-key': `a-${i}` });
      assert.equal(r.status, 201);
      ids.push(r.body.id);
    }
    const redis = new Redis(h.redis.url);
    const record = (key: string) =>
      idempotencyKey('acme', createHash('sha256').update(key).digest('base64url'));
    try {
      const kept = Number(await redis.get(idempotencyKey('acme', '~bytes')));
      assert.ok(kept <= 1_048_576 && kept > 600_000, String(kept));
      assert.equal(await redis.exists(record('a-0')), 0, 'the oldest answer is forgotten');
      assert.equal(await redis.exists(record('a-1')), 0, 'and the next');
      assert.equal(await redis.exists(record('a-4')), 1, 'the newest answer is kept');
    } finally {
      redis.disconnect();
    }
    const newest = await a.post('/v1/sessions', body(4), { 'idempotency-key': 'a-4' });
    assert.equal(newest.headers.get('idempotent-replayed'), 'true');
    assert.equal(newest.body.id, ids[4]);
    // Forgotten: the request runs again, and finds the session its first run made.
    const oldest = await a.post('/v1/sessions', body(0), { 'idempotency-key': 'a-0' });
    assert.equal(oldest.status, 201);
    assert.equal(oldest.body.id, ids[0]);
    // Its key with another body, the record gone: a new request (not taken for the first one's create).
    const reused = await a.post('/v1/sessions', body(7), { 'idempotency-key': 'a-1' });
    assert.equal(reused.status, 201);
    assert.equal(reused.headers.get('idempotent-replayed'), null);
    assert.ok(!ids.includes(reused.body.id));
    const stillB = await b.post('/v1/sessions', body(9), { 'idempotency-key': 'b-1' });
    assert.equal(stillB.headers.get('idempotent-replayed'), 'true');
    assert.equal(stillB.body.id, other.body.id);
  });
});
