/**
 * A session delete killed between its script and giving its bytes back (TENANT_MAX_BYTES) leaves its tenant's count
 * right all the same: each delete records what it owes in the tenant's slot first (a token of its own), its script
 * writes the token and the bytes it removed into the `session.deleted` entry of the log it keeps, and the settle
 * sweep (any replica) pays a record whose token that entry names, once, and drops any other. The kills are simulated
 * on a store of the test's own, on a connection that sends nothing more once a chosen command answered (a process
 * killed then). Cases the reviews of the earlier designs found: two deletes racing, a delete of a session already
 * gone, a delete killed before its script followed by one that runs, an id made again before the settle.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { SessionStore } from '../../src/store/store.js';
import { storageKey } from '../../src/store/storage-quota.js';
import { createSession } from '../../src/sessions/create.js';
import { createSessionBody } from '../../src/schemas.js';

/**
 * A client that dies (sends nothing more, answers nothing) once the command `last` answered, and whose `held`
 * command waits for `open` first: every call after the death is a promise that never settles.
 */
function killedAfter(
  client: Redis,
  last: string,
  held?: { cmd: string; open: Promise<void> },
): { client: Redis; died: Promise<void> } {
  let dead = false;
  let died!: () => void;
  const death = new Promise<void>((done) => (died = done));
  const proxy = new Proxy(client, {
    get(target, prop, receiver) {
      const v: unknown = Reflect.get(target, prop, receiver);
      if (typeof v !== 'function' || prop === 'defineCommand') return v;
      return (...args: unknown[]) => {
        if (dead) return new Promise(() => {});
        const run = () => {
          if (dead) return new Promise(() => {});
          const out: unknown = Reflect.apply(v, target, args);
          if (prop === last && out instanceof Promise)
            return out.finally(() => {
              dead = true;
              died();
            });
          return out;
        };
        if (held && prop === held.cmd) return held.open.then(run);
        return run();
      };
    },
  });
  return { client: proxy, died: death };
}

describe('a session delete killed before giving its bytes back', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  let replica: SessionStore;
  const conns: Redis[] = [];
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TENANT_MAX_BYTES: '10000000' } });
    a = h.api.as('key-a');
    r = new Redis(h.redis.url);
    // Another replica's store: its settle sweep, called by the tests (no grace: the deletes here are done).
    replica = new SessionStore(r, { eventLogMax: 1000, tenantMaxBytes: 10_000_000 });
  });
  after(async () => {
    for (const c of conns) c.disconnect();
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
  const settle = () => replica.settleOwed({ graceMs: 0 });
  /**
   * Deletes session `id` on a store of a connection of its own that dies after `last` (a killed replica); resolves
   * once it died.
   */
  const killedDelete = (id: string, last: string, held?: { cmd: string; open: Promise<void> }) => {
    const conn = new Redis(h.redis.url);
    conns.push(conn);
    const { client, died } = killedAfter(conn, last, held);
    void new SessionStore(client, { eventLogMax: 1000 }).destroy(id, 'acme', Date.now());
    return died;
  };
  /** Until `cond` holds (bounded polling for another connection's effect, never a sleep in its place). */
  const until = async (what: string, cond: () => Promise<boolean>) => {
    const deadline = Date.now() + 10_000;
    while (!(await cond())) {
      assert.ok(Date.now() < deadline, what);
      await new Promise((done) => setImmediate(done));
    }
  };
  const owedLeft = () => r.hlen('t:{acme}:owed');

  it('is paid by the settle sweep, once, and leaves no key of the session but its log', async () => {
    const start = await count();
    const id = await create('killed');
    const bytes = await bytesOf(id);
    assert.ok(bytes > 3000, `the session counts its bytes: ${bytes}`);
    assert.equal(await count(), start + bytes);

    await killedDelete(id, 'sessDestroy');
    assert.equal((await a.req('GET', `/v1/sessions/${id}`)).status, 404);
    assert.equal(await count(), start + bytes, 'the dead replica gave nothing back');

    assert.equal(await settle(), 1);
    assert.equal(await count(), start, 'the bytes given back by the sweep');
    assert.equal(await owedLeft(), 0);
    assert.equal(await r.zcard('quota:owed'), 0, 'the tenant leaves the index with its last record');
    // A second pass, and a delete sent again, give nothing more.
    assert.equal(await settle(), 0);
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 404);
    assert.equal(await count(), start);
    assert.deepEqual(
      await r.keys(`s:{${id}}*`),
      [`s:{${id}}:e`],
      'every key of the session but its log goes',
    );
  });

  it('two deletes racing give back once, whichever of them dies', async () => {
    for (const firstDies of [false, true]) {
      const start = await count();
      const id = await create(`raced-${firstDies}`);
      // Delete B records what it owes, then holds its script until delete A is done, and dies after it.
      let open!: () => void;
      const opened = new Promise<void>((done) => (open = done));
      const bDied = killedDelete(id, 'sessDestroy', { cmd: 'sessDestroy', open: opened });
      await until("delete B's record written", async () => (await owedLeft()) === 1);
      if (firstDies) {
        await killedDelete(id, 'sessDestroy');
        assert.equal(await r.exists(`s:{${id}}`), 0);
      } else {
        assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
        assert.equal(await count(), start, 'delete A gave the bytes back');
      }
      open();
      // B's script ran (found nothing); both records, or B's alone, are left to the sweep.
      await bDied;
      assert.equal(await owedLeft(), firstDies ? 2 : 1);
      await settle();
      assert.equal(await count(), start, `given back once (${firstDies ? 'both died' : 'B died'})`);
      assert.equal(await owedLeft(), 0);
    }
  });

  it('a delete of a session already gone gives nothing back', async () => {
    const id = await create('already-gone');
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    const start = await count();
    // Its script runs and finds nothing: the log has no entry of its token.
    await killedDelete(id, 'sessDestroy');
    assert.equal(await owedLeft(), 1);
    await settle();
    assert.equal(await count(), start);
    assert.equal(await owedLeft(), 0);
  });

  it('a delete killed before its script leaves a record that gives nothing; the delete after it pays', async () => {
    const start = await count();
    const id = await create('before-script');
    const bytes = await bytesOf(id);
    await killedDelete(id, 'zadd');
    assert.equal(await owedLeft(), 1);
    assert.equal(await bytesOf(id), bytes, 'not deleted');
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal(await count(), start, 'the delete that ran gave the bytes back');
    await settle();
    assert.equal(await count(), start, 'the stale record gave nothing');
    assert.equal(await owedLeft(), 0);
  });

  it('an id made again before the settle neither loses nor doubles the give-back', async () => {
    const deps = h.service.app.sessionDeps;
    const body = createSessionBody.parse({ start: false, system: 'y'.repeat(2000) });
    const start = await count();
    const id = await create('made-again');
    await killedDelete(id, 'sessDestroy');
    // Made again (a keyed create, a sub-agent's child): its own events follow the first delete's in the log.
    await createSession(deps, 'acme', body, id);
    const again = await bytesOf(id);
    assert.ok(again > 2000);
    await settle();
    assert.equal(await count(), start + again, "the first delete's bytes given back, the new session's kept");
    // Deleted again, killed again: the sweep pays this one too.
    await killedDelete(id, 'sessDestroy');
    await createSession(deps, 'acme', body, id);
    await settle();
    assert.equal(await count(), start + again);
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal(await count(), start);
    assert.equal(await owedLeft(), 0);
  });

  it('a delete script past its deadline does nothing; one sent again answers as the first time', async () => {
    const id = await create('late');
    const k = (s: string) => `s:{${id}}${s}`;
    const keys = [k(''), k(':m'), k(':i'), k(':q'), k(':e'), k(':l'), k(':c'), k(':ct')] as const;
    const send = (token: string, deadline: string) =>
      r.sessDestroy(...keys, '{}', 60_000, 'ch', '', token, deadline);
    assert.deepEqual(await send('tok', String(Date.now() - 60_000)), [-2, 0]);
    assert.equal(await r.exists(k('')), 1);
    // The same script sent again (a reply lost, ioredis resending it on reconnect): answered as the first time,
    // even past its deadline, so its delete pays its record rather than dropping it.
    const bytes = await bytesOf(id);
    assert.deepEqual(await send('tok2', String(Date.now() + 60_000)), [1, bytes]);
    assert.deepEqual(await send('tok2', String(Date.now() - 60_000)), [1, bytes]);
    const deleted = (await r.xrange(k(':e'), '-', '+')).filter(([, f]) => f[1] === 'session.deleted');
    assert.equal(deleted.length, 1, 'written once');
    // Another delete's token finds nothing to delete.
    assert.deepEqual(await send('tok3', ''), [0, 0]);
    await r.incrby(storageKey('acme'), -bytes); // what its delete would have given back
  });
});
