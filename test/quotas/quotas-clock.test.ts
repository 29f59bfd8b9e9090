/**
 * The quotas' counts across replicas are kept on Redis's clock, not on a replica's: a replica whose clock is minutes
 * off neither takes the other replicas' live stream slots for expired (a tenant past TENANT_MAX_STREAMS or a client
 * token past CLIENT_TOKEN_MAX_STREAMS) nor keeps a dead replica's slots counted past their expiry; nor does it prune
 * a run slot whose session is still being written (a tenant past TENANT_MAX_ACTIVE_RUNS) or keep stale ones from
 * the prune. The skewed replica is either the whole service (the process's Date.now() moved and its reckoning of
 * Redis's clock read again, as its boot and each of its sweeps do: src/redis/clock.ts) or a TenantSlots or RunQueue
 * in this process beside it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { asReplica, skewed } from '../helpers/skewed-clock.js';
import { connectWs, UpgradeRefused, type WsClient } from '../fixtures/event-clients.js';
import { TenantSlots } from '../../src/quotas/slots.js';
import { RunQueue } from '../../src/store/runs.js';
import { RUNS_KEY, tenantRunsKey } from '../../src/store/keys.js';
import { isQuota } from '../../src/errors.js';

/** Far more than the slots' TTL (60 s). */
const SKEW_MS = 10 * 60_000;

const KEYS = 'acme:key-acme,globex:key-globex,initech:key-initech,hooli:key-hooli';

const overQuota = (quota: string, limit: number) => (err: unknown) => {
  assert.ok(err instanceof UpgradeRefused, String(err));
  assert.equal(err.status, 429, JSON.stringify(err.body));
  assert.equal(err.body.error.code, 'quota_exceeded');
  assert.deepEqual(err.body.error.details, { quota, limit });
  return true;
};

describe('quotas with a replica whose clock is off', { timeout: 60_000 }, () => {
  let h: Harness;
  let r: Redis;
  const open: WsClient[] = [];
  before(async () => {
    h = await startHarness({
      env: { API_KEYS: KEYS, TENANT_MAX_STREAMS: '2', CLIENT_TOKEN_MAX_STREAMS: '1' },
    });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    for (const c of open) c.close();
    await Promise.all(open.map((c) => c.closed));
    r?.disconnect();
    await h?.close();
  });

  /** Redis's now (ms). */
  const redisNow = async () => {
    const [s, us] = await r.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };

  /** An idle session of the key's tenant. */
  async function session(key: string): Promise<string> {
    const made = await h.api.as(key).post('/v1/sessions', { start: false });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body.id as string;
  }

  describe('stream slots (q:{T}:ws)', () => {
    it('a replica ahead does not let a tenant past TENANT_MAX_STREAMS', async () => {
      const id = await session('key-acme');
      for (let i = 0; i < 2; i++) open.push(await connectWs(h.service.url, id, { token: 'key-acme' }));
      // 10 minutes ahead, the two live slots (a minute left in Redis's clock) are long expired by its clock.
      await asReplica(h.service.app, SKEW_MS, () =>
        assert.rejects(
          connectWs(h.service.url, id, { token: 'key-acme' }),
          overQuota('TENANT_MAX_STREAMS', 2),
        ),
      );
      assert.equal(await r.zcard('q:{acme}:ws'), 2);
    });

    it('a replica ahead does not let a client token past CLIENT_TOKEN_MAX_STREAMS', async () => {
      const id = await session('key-globex');
      const made = await h.api
        .as('key-globex')
        .post('/v1/client-tokens', { session_id: id, scopes: ['read'] });
      assert.equal(made.status, 201, JSON.stringify(made.body));
      const token = made.body.token as string;
      open.push(await connectWs(h.service.url, id, { protocolToken: token }));
      await asReplica(h.service.app, SKEW_MS, () =>
        assert.rejects(
          connectWs(h.service.url, id, { protocolToken: token }),
          overQuota('CLIENT_TOKEN_MAX_STREAMS', 1),
        ),
      );
      // The tenant's count holds the one stream.
      assert.equal(await r.zcard('q:{globex}:ws'), 1);
    });

    it('a replica behind drops slots whose expiry passed in Redis’s clock', async () => {
      const id = await session('key-initech');
      // What a replica of an older version (no liveness entry) left when it died: slots expired a second ago.
      const past = (await redisNow()) - 1000;
      await r.zadd('q:{initech}:ws', past, 'old-replica:1', past, 'old-replica:2');
      // 10 minutes behind, they have 9 minutes left by its clock.
      const c = await asReplica(h.service.app, -SKEW_MS, () =>
        connectWs(h.service.url, id, { token: 'key-initech' }),
      );
      open.push(c);
      const held = await r.zrange('q:{initech}:ws', 0, -1);
      assert.equal(held.length, 1);
      assert.ok(!held.some((m) => m.startsWith('old-replica:')), held.join());
    });

    it('a replica behind takes a slot without dropping the others’', async () => {
      const id = await session('key-hooli');
      open.push(await connectWs(h.service.url, id, { token: 'key-hooli' }));
      // 10 minutes behind, a slot's expiry by its clock is in Redis's past: the key's with it.
      open.push(
        await asReplica(h.service.app, -SKEW_MS, () => connectWs(h.service.url, id, { token: 'key-hooli' })),
      );
      assert.equal(await r.zcard('q:{hooli}:ws'), 2, 'both streams counted');
      await assert.rejects(
        connectWs(h.service.url, id, { token: 'key-hooli' }),
        overQuota('TENANT_MAX_STREAMS', 2),
      );
    });

    it('a replica ahead or behind takes and renews a slot until a TTL past Redis’s now', async (t) => {
      const slots = new TenantSlots(h.service.app.redis, 'clock', { ttlMs: 60_000 });
      t.after(() => slots.close());
      const key = 'q:{acme}:clock';
      /** The slot's expiry less Redis's now; and the key's own. */
      const left = async () => {
        const [, score] = await r.zrange(key, 0, -1, 'WITHSCORES');
        return { slot: Number(score) - (await redisNow()), key: await r.pttl(key) };
      };
      const inTtl = ({ slot, key }: { slot: number; key: number }, what: string) => {
        assert.ok(slot > 55_000 && slot <= 60_000, `${what}: the slot expires ${slot} ms from Redis's now`);
        assert.ok(key > 55_000 && key <= 60_000, `${what}: the key expires in ${key} ms`);
      };
      const release = await skewed(SKEW_MS, () => slots.acquire('acme', 1));
      assert.ok(release, 'taken');
      inTtl(await left(), 'taken 10 minutes ahead');
      await skewed(SKEW_MS, () => slots.renew());
      inTtl(await left(), 'renewed 10 minutes ahead');
      // Behind, a renewal does not leave the slot already expired for the others.
      await skewed(-SKEW_MS, () => slots.renew());
      inTtl(await left(), 'renewed 10 minutes behind');
      release();
    });
  });

  describe('run slots (q:{T}:runs)', () => {
    /** A run queue beside the service's, with TENANT_MAX_ACTIVE_RUNS 1. */
    const queue = () => new RunQueue(h.service.app.redis, 1, h.service.app.store.clock);
    const refused = (err: unknown) => isQuota(err, 'TENANT_MAX_ACTIVE_RUNS');

    it('a replica ahead does not drop a slot whose session is still being written', async () => {
      const runs = queue();
      // What a create leaves before its write: the slot taken, the session not there yet.
      await runs.admit('runs-ahead', 'ses_on_its_way');
      // 10 minutes ahead, the slot (taken just now in Redis's clock) is older than the grace by its clock.
      await assert.rejects(
        skewed(SKEW_MS, () => runs.admit('runs-ahead', 'ses_ahead')),
        refused,
      );
      assert.deepEqual(await r.zrange(tenantRunsKey('runs-ahead'), 0, -1), ['ses_on_its_way']);
    });

    it('a replica behind drops a stale slot older than the grace in Redis’s clock', async () => {
      const runs = queue();
      // A run that ended 11 s ago without giving its slot back (its session not running).
      await r.zadd(tenantRunsKey('runs-behind'), (await redisNow()) - 11_000, 'ses_ended');
      // 10 minutes behind, the slot is 10 minutes younger than the grace by its clock.
      await skewed(-SKEW_MS, () => runs.admit('runs-behind', 'ses_behind'));
      assert.deepEqual(await r.zrange(tenantRunsKey('runs-behind'), 0, -1), ['ses_behind']);
    });

    it('a replica ahead or behind dates a held slot by Redis’s now', async () => {
      const runs = queue();
      for (const skew of [SKEW_MS, -SKEW_MS]) {
        // A heartbeat's (or a takeover's) hold of a running session's slot; its due entry left to nobody.
        await skewed(skew, () => runs.keep({ id: 'ses_held', fence: 0, tenant: null }, 60_000, 'runs-held'));
        await r.zrem(RUNS_KEY, 'ses_held');
        const age = (await redisNow()) - Number(await r.zscore(tenantRunsKey('runs-held'), 'ses_held'));
        assert.ok(age >= 0 && age < 5_000, `held ${skew > 0 ? 'ahead' : 'behind'}: dated ${age} ms ago`);
      }
    });
  });
});
