/**
 * A session delete killed after its script gives its bytes back all the same: the tenant's byte count
 * (TENANT_MAX_BYTES) is in another slot than the session, so the delete gives the bytes back after its script, in a
 * command of its own. The kill is simulated precisely: a store of the test's own, on a connection that sends
 * nothing more once the delete script answered (as a process killed then), deletes the session. The service's next
 * quota check of the tenant then gives the bytes back, once; a delete sent again, or one refused, gives nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { SessionStore } from '../../src/store/store.js';
import { storageKey } from '../../src/store/storage-quota.js';

/**
 * A client that dies (sends nothing more, answers nothing) once the command `last` answered: every later call is a
 * promise that never settles, as for a process killed then.
 */
function killedAfter(client: Redis, last: string): Redis {
  let dead = false;
  return new Proxy(client, {
    get(target, prop, receiver) {
      const v: unknown = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || prop === 'defineCommand') return v;
      return (...args: unknown[]) => {
        if (dead) return new Promise(() => {});
        const out: unknown = Reflect.apply(v, target, args);
        if (prop === last && out instanceof Promise) return out.finally(() => (dead = true));
        return out;
      };
    },
  });
}

describe('a session delete killed after its script', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TENANT_MAX_BYTES: '10000000' } });
    a = h.api.as('key-a');
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  const count = async () => Number((await r.get(storageKey('acme'))) ?? 0);
  const bytesOf = async (id: string) => Number((await r.hget(`s:{${id}}`, 'bytes')) ?? 0);
  const create = async (name: string) => {
    const res = await a.post('/v1/sessions', { start: false, metadata: { name }, system: 'x'.repeat(3000) });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.id as string;
  };

  it('gives its bytes back at the tenant’s next quota check, once', async () => {
    const gone = await create('gone');
    const kept = await create('kept');
    const [goneBytes, keptBytes] = [await bytesOf(gone), await bytesOf(kept)];
    assert.ok(goneBytes > 3000, `the session counts its bytes: ${goneBytes}`);
    assert.equal(await count(), goneBytes + keptBytes);

    // The killed replica: its delete's script ran, then nothing more.
    const conn = new Redis(h.redis.url);
    const store = new SessionStore(killedAfter(conn, 'sessDestroy'), { eventLogMax: 1000 });
    void store.destroy(gone, 'acme', Date.now());
    try {
      // Bounded polling for the script's effect (never a sleep in its place).
      const deadline = Date.now() + 10_000;
      while ((await r.exists(`s:{${gone}}`)) === 1) {
        assert.ok(Date.now() < deadline, 'the delete script ran');
        await new Promise((done) => setImmediate(done));
      }
    } finally {
      conn.disconnect();
    }
    assert.equal((await a.req('GET', `/v1/sessions/${gone}`)).status, 404);
    assert.equal(await count(), goneBytes + keptBytes, 'the dead replica gave nothing back');

    // The next write of the tenant that is checked against its quota (on the service: another replica).
    const next = await create('next');
    assert.equal(await count(), keptBytes + (await bytesOf(next)), 'the deleted session’s bytes given back');
    // A delete sent again gives nothing back a second time.
    assert.equal((await a.req('DELETE', `/v1/sessions/${gone}`)).status, 404);
    const later = await create('later');
    assert.equal(await count(), keptBytes + (await bytesOf(next)) + (await bytesOf(later)));
  });

  it('a delete that did not happen gives nothing back and leaves no record', async () => {
    const id = await create('stays');
    const before = await count();
    const store = new SessionStore(r, { eventLogMax: 1000 });
    // A swept delete guarded by a revision the session moved past: refused.
    assert.equal(await store.destroy(id, 'acme', Date.now(), { revision: 0 }), false);
    assert.equal(await r.exists(`s:{${id}}`), 1);
    assert.equal(await count(), before);
    assert.equal(await r.hlen('t:{acme}:bytes:owed'), 0);
    // Deleted for real: given back once.
    const bytes = await bytesOf(id);
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal(await count(), before - bytes);
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 404);
    assert.equal(await count(), before - bytes);
  });
});
