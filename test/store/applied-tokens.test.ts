/**
 * The `applied` guard of a session's `apply` (lua/includes/recent.lua): a keyed request's change records its
 * Idempotency-Key token in the same script; the same token again changes nothing and is refused with the recorded
 * entry (AlreadyApplied), whatever the other guards say; the session keeps only its newest tokens.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { SessionStore } from '../../src/store/store.js';
import { AlreadyApplied } from '../../src/store/apply-ops.js';

describe('applied tokens', () => {
  let redis: TestRedis;
  let cmd: Redis;
  let store: SessionStore;

  before(async () => {
    redis = await startTestRedis();
    cmd = new Redis(redis.url);
    store = new SessionStore(cmd, { eventLogMax: 1000 });
  });
  after(async () => {
    cmd.disconnect();
    await redis.stop();
  });

  it('records a token with its change, refuses it after, and keeps the newest only', async () => {
    const id = 'ses_appliedtokens1';
    await store.apply(id, { create: true }, { hset: { id, tenant: 't', status: 'idle', n: '0' } }, 't');
    const change = (t: string, rev?: number) =>
      store.apply(
        id,
        { ...(rev !== undefined ? { rev } : {}), applied: { t, q: true, keep: 2 } },
        { hincr: { n: 1 } },
      );
    const first = await change('tok-a', 1);
    // The retry's revision guard no longer holds (the first change moved it): the token is what answers.
    await assert.rejects(change('tok-a', 1), (err: unknown) => {
      assert.ok(err instanceof AlreadyApplied);
      assert.deepEqual(err.entry, { t: 'tok-a', q: true });
      return true;
    });
    const s = await store.load(id);
    assert.equal(s?.revision, first.revision, 'nothing written by the refused change');
    assert.equal(await cmd.hget(`s:{${id}}`, 'n'), '1');
    assert.deepEqual(s?.applied, [{ t: 'tok-a', q: true }]);
    await change('tok-b');
    await change('tok-c');
    assert.deepEqual(
      (await store.load(id))?.applied?.map((e) => e.t),
      ['tok-c', 'tok-b'],
      'the newest two are kept',
    );
    // Forgotten: applied again.
    await change('tok-a');
    assert.equal(await cmd.hget(`s:{${id}}`, 'n'), '4');
  });
});
