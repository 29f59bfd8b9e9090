/**
 * A session delete killed after its script gives its bytes back all the same: the tenant's byte count
 * (TENANT_MAX_BYTES) is in another slot than the session, so the delete gives the bytes back after its script, in a
 * command of its own. Each delete records what it owes first, under a record of its own, and its script names that
 * record in the session's `gone` key; a record its delete left is settled by a later quota check (of any replica):
 * paid only if `gone` names it. The kills are simulated precisely: a store of the test's own, on a connection that
 * sends nothing more once a chosen command answered (as a process killed then). A delete sent again, a second delete
 * racing the first, one refused, or one killed before its script gives nothing back (found by a review).
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

/** A client whose `cmd` calls wait for `open` once `answered` has been called back by a `before` call's answer. */
function gated(client: Redis, before: string, answered: () => void, cmd: string, open: Promise<void>): Redis {
  return new Proxy(client, {
    get(target, prop, receiver) {
      const v: unknown = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || prop === 'defineCommand') return v;
      return (...args: unknown[]) => {
        if (prop === cmd) return open.then(() => Reflect.apply(v, target, args) as unknown);
        const out: unknown = Reflect.apply(v, target, args);
        if (prop === before && out instanceof Promise) return out.finally(answered);
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

  /** Records left this long ago: a quota check settles them (younger ones are their deletes', under way). */
  const aged = async () => {
    for (const [field, value] of Object.entries(await r.hgetall('t:{acme}:bytes:owed')))
      await r.hset('t:{acme}:bytes:owed', field, `${value.split(' ')[0]} ${Date.now() - 60_000}`);
  };
  /** A quota check of the tenant on a replica that has not looked at its records yet (one byte, given back). */
  const checked = async () => {
    const replica = new SessionStore(r, { eventLogMax: 1000, tenantMaxBytes: 10_000_000 });
    await replica.chargeBytes('acme', 1);
    await replica.chargeBytes('acme', -1);
  };
  /** Until the session's keys are gone (bounded polling for a script's effect, never a sleep in its place). */
  const deleted = async (id: string) => {
    const deadline = Date.now() + 10_000;
    while ((await r.exists(`s:{${id}}`)) === 1) {
      assert.ok(Date.now() < deadline, 'the delete script ran');
      await new Promise((done) => setImmediate(done));
    }
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
      await deleted(gone);
    } finally {
      conn.disconnect();
    }
    assert.equal((await a.req('GET', `/v1/sessions/${gone}`)).status, 404);
    assert.equal(await count(), goneBytes + keptBytes, 'the dead replica gave nothing back');

    // The next quota check of the tenant, once the record is no longer its delete's (another replica).
    await aged();
    await checked();
    assert.equal(await count(), keptBytes, 'the deleted session’s bytes given back');
    assert.equal(await r.hlen('t:{acme}:bytes:owed'), 0);
    // A delete sent again gives nothing back a second time.
    assert.equal((await a.req('DELETE', `/v1/sessions/${gone}`)).status, 404);
    await checked();
    assert.equal(await count(), keptBytes);
    assert.equal((await a.req('DELETE', `/v1/sessions/${kept}`)).status, 200);
  });

  it('a second delete racing the first, killed after its script, gives nothing back', async () => {
    const gone = await create('raced');
    const before = await count();
    const bytes = await bytesOf(gone);
    // Delete B reads the session's bytes, then waits before its record until delete A is done; it dies after its
    // script (which found nothing to delete).
    let read!: () => void;
    const hasRead = new Promise<void>((done) => (read = done));
    let open!: () => void;
    const opened = new Promise<void>((done) => (open = done));
    const conn = new Redis(h.redis.url);
    const store = new SessionStore(killedAfter(gated(conn, 'hget', read, 'hset', opened), 'sessDestroy'), {
      eventLogMax: 1000,
    });
    const b = store.destroy(gone, 'acme', Date.now());
    await hasRead;
    assert.equal((await a.req('DELETE', `/v1/sessions/${gone}`)).status, 200);
    assert.equal(await count(), before - bytes, 'delete A gave the bytes back');
    open();
    try {
      const deadline = Date.now() + 10_000;
      while ((await r.hlen('t:{acme}:bytes:owed')) === 0) {
        assert.ok(Date.now() < deadline, "delete B's record written");
        await new Promise((done) => setImmediate(done));
      }
      void b;
    } finally {
      conn.disconnect();
    }
    await aged();
    await checked();
    assert.equal(await count(), before - bytes, 'given back once');
    assert.equal(await r.hlen('t:{acme}:bytes:owed'), 0, "B's record dropped");
  });

  it('a delete killed before its script, then a delete that runs: given back once, by the one that ran', async () => {
    const id = await create('later deleted');
    const before = await count();
    const bytes = await bytesOf(id);
    const conn = new Redis(h.redis.url);
    const store = new SessionStore(killedAfter(conn, 'hset'), { eventLogMax: 1000 });
    void store.destroy(id, 'acme', Date.now());
    try {
      const deadline = Date.now() + 10_000;
      while ((await r.hlen('t:{acme}:bytes:owed')) === 0) {
        assert.ok(Date.now() < deadline, "the killed delete's record written");
        await new Promise((done) => setImmediate(done));
      }
    } finally {
      conn.disconnect();
    }
    assert.equal(await r.exists(`s:{${id}}`), 1, 'its script never ran');
    // Its session grows before another delete runs: that delete gives back what it read.
    const more = await a.post(`/v1/sessions/${id}/messages`, { content: 'y'.repeat(2000) });
    assert.ok(more.status < 300, JSON.stringify(more.body));
    await a.waitStatus(id, 'idle', 20_000);
    const grown = await bytesOf(id);
    assert.ok(grown > bytes);
    await aged();
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    await checked();
    // The count had the growth added; the delete gave back all of it (what it read), the killed one nothing.
    assert.equal(await count(), before - bytes);
    assert.equal(await r.hlen('t:{acme}:bytes:owed'), 0, 'the killed delete’s record dropped');
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
