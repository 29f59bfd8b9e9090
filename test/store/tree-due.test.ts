/**
 * A pass of the agents' sweep (src/agents/sweep.ts) takes its members from TreeDue.due: `limit` of them whenever that
 * many are due, however they are spread across tenants, one of each tenant's in turn (a tenant's burst takes only
 * what the others leave), in two round trips whatever the number of tenants. Each member's tenant is kept beside the
 * sets while it is a member, for a wake-up of a member whose session is gone (RunQueue.end).
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { RedisClient } from '../../src/store/lua-commands.js';
import { LEGACY_AGENTS_DUE_KEY, TreeDue, treeDueKey } from '../../src/store/tree-due.js';
import { storeRedisForSuite } from '../helpers/redis.js';
import { RedisClock } from '../../src/redis/clock.js';

const LIMIT = 50;

describe("the sub-agent trees' due sets (TreeDue)", { timeout: 60_000 }, () => {
  const store = storeRedisForSuite();
  let redis: RedisClient;
  let trees: TreeDue;
  before(() => {
    redis = store.redis;
    trees = new TreeDue(redis, new RedisClock());
  });

  /** `counts[i]` members of tenant `t<i>` (`t<i>-<j>`), each due now (watched, then woken). */
  async function members(counts: number[]): Promise<void> {
    const writes: Array<Promise<void>> = [];
    for (const [i, n] of counts.entries())
      for (let j = 0; j < n; j++)
        writes.push(trees.watch(`t${i}-${j}`, `t${i}`).then(() => trees.wake(`t${i}-${j}`, `t${i}`)));
    await Promise.all(writes);
  }

  /** One pass's read, and how many round trips it took. */
  async function pass(): Promise<{ ids: string[]; perTenant: Map<string, number>; roundTrips: number }> {
    let roundTrips = 0;
    const counted = new Proxy(redis, {
      get(target, key) {
        const v = Reflect.get(target, key) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          // A direct command is one round trip; a pipeline is one, at its exec.
          if (key !== 'pipeline') roundTrips++;
          const r = (v as (...a: unknown[]) => unknown).apply(target, args);
          if (key === 'pipeline') {
            const p = r as { exec: () => Promise<unknown> };
            const exec = p.exec.bind(p);
            p.exec = () => {
              roundTrips++;
              return exec();
            };
          }
          return r;
        };
      },
    });
    const got = await new TreeDue(counted, new RedisClock()).due(LIMIT);
    const perTenant = new Map<string, number>();
    for (const e of got) perTenant.set(e.tenant ?? 'old', (perTenant.get(e.tenant ?? 'old') ?? 0) + 1);
    return { ids: got.map((e) => e.id), perTenant, roundTrips };
  }

  it('a burst of one tenant takes what the tenants with one member each leave: 50 in all', async () => {
    // 10 tenants with one member each, and one with 1,000.
    await members([1000, ...Array<number>(10).fill(1)]);
    const { ids, perTenant, roundTrips } = await pass();
    assert.equal(ids.length, LIMIT, `members in a pass: ${ids.length}`);
    assert.equal(new Set(ids).size, LIMIT, 'no member twice');
    for (let i = 1; i <= 10; i++) assert.equal(perTenant.get(`t${i}`), 1, `tenant t${i}`);
    assert.equal(perTenant.get('t0'), LIMIT - 10);
    assert.ok(roundTrips <= 3, `round trips: ${roundTrips}`);
  });

  it('200 tenants with one member each: 50 tenants a pass', async () => {
    await members(Array<number>(200).fill(1));
    const { ids, perTenant, roundTrips } = await pass();
    assert.equal(ids.length, LIMIT);
    assert.equal(perTenant.size, LIMIT);
    assert.ok(roundTrips <= 3, `round trips: ${roundTrips}`);
  });

  it('two bursts share the pass; the old single set is one more list, never starved', async () => {
    await members([1000, 1000]);
    let r = await pass();
    assert.deepEqual([r.perTenant.get('t0'), r.perTenant.get('t1')], [25, 25]);
    await redis.flushall();
    // 100 members a replica of the last version wrote, and one tenant with 3 members, one with 1.
    await redis.zadd(LEGACY_AGENTS_DUE_KEY, ...Array.from({ length: 100 }, (_, i) => [i, `old-${i}`]).flat());
    await members([3, 1]);
    r = await pass();
    assert.equal(r.ids.length, LIMIT);
    assert.deepEqual([r.perTenant.get('t0'), r.perTenant.get('t1'), r.perTenant.get('old')], [3, 1, 46]);
    // More tenants due than a pass takes: the old set still has its turn (it is not left what they leave).
    await members(Array<number>(60).fill(1));
    r = await pass();
    assert.equal(r.ids.length, LIMIT);
    assert.equal(r.perTenant.get('old'), 1);
  });

  it('a member written before its tenant was kept (tree-due-2.lua) has it from its next wake-up or look', async () => {
    // As the version before wrote them: in their tenant's set, with no tenant kept beside.
    await redis.zadd(treeDueKey('t0'), Date.now(), 'woken', Date.now(), 'looked');
    await redis.zadd('{agents}:tenants', Date.now(), 't0');
    assert.equal(await trees.tenantOf('woken'), null);
    await trees.wake('woken', 't0');
    const [looked] = (await trees.due(LIMIT)).filter((e) => e.id === 'looked');
    await trees.settle(looked!, 60_000);
    assert.deepEqual([await trees.tenantOf('woken'), await trees.tenantOf('looked')], ['t0', 't0']);
    // A member dropped (its session gone) leaves nothing behind.
    await trees.wake('looked', 't0');
    const [gone] = (await trees.due(LIMIT)).filter((e) => e.id === 'looked');
    await trees.settle(gone!, null);
    assert.equal(await trees.tenantOf('looked'), null);
  });

  it('`soon` brings a member sooner, never puts off a wake-up, and makes no member', async () => {
    await trees.watch('parked', 't0');
    await trees.watch('woken', 't0');
    await trees.wake('woken', 't0');
    const woken = await redis.zscore(treeDueKey('t0'), 'woken');
    // Redis's clock around the calls (the script's), so a slow machine cannot move the bounds.
    const redisMs = async () => {
      const [sec, us] = await redis.time();
      return Number(sec) * 1000 + Number(us) / 1000;
    };
    const before = await redisMs();
    await trees.soon('parked', 't0', 2000);
    const afterSoon = await redisMs();
    await trees.soon('woken', 't0', 2000);
    await trees.soon('stranger', 't0', 2000);
    const parked = Number(await redis.zscore(treeDueKey('t0'), 'parked'));
    assert.ok(
      parked >= Math.floor(before) + 2000 && parked <= afterSoon + 2001,
      `parked due ${parked - before} ms after the call`,
    );
    assert.equal(await redis.zscore(treeDueKey('t0'), 'woken'), woken, 'a wake-up is not put off');
    assert.equal(await redis.zscore(treeDueKey('t0'), 'stranger'), null);
    // The tenants' index follows the tenant's earliest entry (the wake-up's).
    assert.equal(await redis.zscore('{agents}:tenants', 't0'), woken);
  });

  it('while the old set holds members, a wake-up reaches one there a look has not moved yet', async () => {
    // A member a replica of the last version watched (due a minute from now), not yet moved to its tenant's set.
    const later = Date.now() + 60_000;
    await redis.zadd(LEGACY_AGENTS_DUE_KEY, later, 'old-root');
    const fresh = new TreeDue(redis, new RedisClock());
    await fresh.due(LIMIT);
    await fresh.wake('old-root', 't0');
    assert.ok(Number(await redis.zscore(LEGACY_AGENTS_DUE_KEY, 'old-root')) < later - 30_000, 'woken');
    assert.deepEqual(await redis.zrange(treeDueKey('t0'), 0, -1), [], 'not made a member of its tenant set');
    // Once a pass finds the old set empty, a wake-up writes only the tenant's set (ZADD XX: nothing for a non-member).
    await redis.del(LEGACY_AGENTS_DUE_KEY);
    await fresh.due(LIMIT);
    await fresh.wake('old-root', 't0');
    assert.equal(await redis.exists(LEGACY_AGENTS_DUE_KEY), 0);
  });
});
