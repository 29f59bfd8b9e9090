/**
 * `Idempotency-Key` and 429s: a refusal for now (a quota, a rate) is not kept as the key's answer, so the retry once
 * there is room gets the real one; and a keyed create whose session exists (its first request died before its
 * answer's record) answers that session at TENANT_MAX_SESSIONS instead of refusing it for itself.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';

describe('Idempotency-Key and 429 answers', { timeout: 60_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-acme', TENANT_MAX_SESSIONS: '1' } });
    a = h.api.as('key-acme');
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r.disconnect();
    await h?.close();
  });

  const create = (key: string) =>
    a.req('POST', '/v1/sessions', { input: 'hello', start: false }, { 'idempotency-key': key });

  it('a 429 is not replayed: the retry with room creates the session', async () => {
    const first = await create('one');
    assert.equal(first.status, 201);
    const refused = await create('two');
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.details.quota, 'TENANT_MAX_SESSIONS');
    assert.equal((await a.req('DELETE', `/v1/sessions/${first.body.id}`)).status, 200);
    const retried = await create('two');
    assert.equal(retried.status, 201, JSON.stringify(retried.body));
    assert.equal(retried.headers.get('idempotent-replayed'), null, 'a new answer, not the kept 429');
    // Now kept: the same key answers the same session.
    const again = await create('two');
    assert.equal(again.status, 201);
    assert.equal(again.body.id, retried.body.id);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
  });

  it('a keyed create whose record was lost answers its session at the cap, and another key is refused', async () => {
    const made = await create('three');
    // The tenant is at its cap with `two`'s session; room for `three` is made first.
    if (made.status === 429) {
      for (const s of (await a.get('/v1/sessions')).body.data)
        assert.equal((await a.req('DELETE', `/v1/sessions/${s.id}`)).status, 200);
    }
    const own = made.status === 201 ? made : await create('three');
    assert.equal(own.status, 201, JSON.stringify(own.body));
    // The answers' records are lost, as when the first request's process died between its write and its record.
    const records = (await r.keys('idem:{acme}:*')).filter((k) => !k.includes('~'));
    assert.ok(records.length > 0);
    await r.del(...records);
    const retry = await create('three');
    assert.equal(retry.status, 201, JSON.stringify(retry.body));
    assert.equal(retry.body.id, own.body.id);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal((await create('four')).status, 429, 'a new create is still refused at the cap');
  });
});
