/**
 * Schedule fires and their pending leases are of Redis's clock, not of the replica's: a replica whose clock is far
 * ahead neither fires a schedule before its time nor takes over a pending fire whose claimer's lease still runs
 * (it created the fire's session meanwhile, beside the claimer's create). The skewed replica is a scheduler in this
 * process with the process's Date.now() moved, beside the service's own (whose clock is Redis's). A fire's end
 * (finish-3.lua) is of Redis's clock too, whichever replica ends it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { Scheduler } from '../../src/schedules/scheduler.js';
import { fireSessionId } from '../../src/schedules/keys.js';

/** Far more than a fire's lease (10 s), and than the fire below is ahead. */
const SKEW_MS = 10 * 60_000;

describe('schedules with a replica whose clock is off', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a' } });
    a = h.api.as('key-a');
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  /** Runs `fn` with this process's Date.now() moved by `skew` ms (restored after). */
  async function skewed<T>(skew: number, fn: () => Promise<T>): Promise<T> {
    const real = Date.now;
    Date.now = () => real() + skew;
    try {
      return await fn();
    } finally {
      Date.now = real;
    }
  }

  /** One pass of a second replica's scheduler, 10 minutes ahead, and the ticks it started. */
  async function sweepAhead(): Promise<void> {
    const app = h.service.app;
    const other = new Scheduler({
      store: app.schedules.store,
      sessions: app.store,
      deps: app.sessionDeps,
      log: app.log,
      sweepMs: 60_000,
      maxSessions: 0,
    });
    await skewed(SKEW_MS, async () => {
      await (other as unknown as { sweep(): Promise<void> }).sweep();
      // Waits for the ticks the pass started (the loop itself was never started).
      await other.stop();
    });
  }

  const iso = (ms: number) => new Date(ms).toISOString();

  const redisNow = async () => {
    const [s, us] = await r.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };

  it('a replica ahead does not fire a schedule before its time', async () => {
    const at = (await redisNow()) + 5 * 60_000;
    const made = await a.post('/v1/schedules', {
      at: new Date(at).toISOString(),
      session: { input: 'later' },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    await sweepAhead();
    const s = (await a.get(`/v1/schedules/${made.body.id}`)).body;
    assert.equal(s.fires, 0, JSON.stringify(s));
    assert.equal(s.next_run_at, new Date(at).toISOString());
    assert.equal(await r.hget(`s:{${made.body.id}}`, 'pending'), null, 'no fire claimed');
    assert.equal(await r.exists(`s:{${fireSessionId(made.body.id, at)}}`), 0, 'no session created');
  });

  it("a replica ahead does not take over a pending fire whose claimer's lease runs", async () => {
    const made = await a.post('/v1/schedules', { cron: '0 0 1 1 *', session: { input: 'new year' } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.id as string;
    // What claim-2.lua leaves while its replica creates the fire's session: the fire pending, leased for 60 s of
    // Redis's clock, due again when the lease ends.
    const fireAt = Date.parse('2026-01-01T00:00:00Z');
    const until = (await redisNow()) + 60_000;
    await r.hset(`s:{${id}}`, 'pending', String(fireAt), 'pending_until', String(until));
    await r.zadd('schedules:due', until, id);
    await sweepAhead();
    assert.equal(
      await r.hget(`s:{${id}}`, 'pending_until'),
      String(until),
      'the lease is the claimer’s still',
    );
    assert.equal(await r.exists(`s:{${fireSessionId(id, fireAt)}}`), 0, 'the fire was not created meanwhile');
    // Asked directly, the lease is not over either.
    const retaken = await skewed(SKEW_MS, () => h.service.app.schedules.store.retake(id, fireAt, 10_000));
    assert.equal(retaken, false);
    assert.equal(await r.hget(`s:{${id}}`, 'pending_until'), String(until));
  });

  it('a replica off the clock ends a fire in Redis’s clock', async () => {
    const made = await a.post('/v1/schedules', { cron: '0 0 1 1 *', session: { input: 'new year' } });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const id = made.body.id as string;
    const fireAt = Date.parse('2026-01-01T00:00:00Z');
    await r.hset(
      `s:{${id}}`,
      'pending',
      String(fireAt),
      'pending_until',
      String((await redisNow()) + 60_000),
    );
    const { store } = h.service.app.schedules;
    const s = await store.get('acme', id);
    const ended = await skewed(SKEW_MS, () =>
      store.finish(s, fireAt, 'skipped', '', { schedule_id: id, scheduled_for: iso(fireAt), reason: 'test' }),
    );
    assert.equal(ended, true);
    const now = await redisNow();
    const updated = Number(await r.hget(`s:{${id}}`, 'updated_at'));
    assert.ok(Math.abs(updated - now) < 5_000, `updated_at ${iso(updated)}, Redis's now ${iso(now)}`);
    const [last] = (await a.get(`/v1/schedules/${id}/events?limit=500`)).body.data.slice(-1);
    assert.equal(last.type, 'schedule.skipped');
    const at = Date.parse(last.at);
    assert.ok(
      Math.abs(at - now) < 5_000,
      `the event's time ${JSON.stringify(last)}, Redis's now ${iso(now)}`,
    );
  });
});
