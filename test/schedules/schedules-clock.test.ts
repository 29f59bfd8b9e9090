/**
 * Schedule fires and their pending leases are of Redis's clock, not of the replica's: a replica whose clock is far
 * ahead neither fires a schedule before its time nor takes over a pending fire whose claimer's lease still runs
 * (it created the fire's session meanwhile, beside the claimer's create). The skewed replica is a scheduler in this
 * process with the process's Date.now() moved, beside the service's own (whose clock is Redis's).
 *
 * A fire's end (finish-3.lua) is of Redis's clock too, whichever replica ends it. And so are the times a replica
 * computes for a schedule: a create's or a resume's `next_run_at` (an `at` still to come in Redis's clock keeps its
 * fire on a replica ahead; a cron resumed on a replica behind makes no burst of fires for its minutes). There the
 * whole service is the skewed replica: the process's Date.now() is moved and its reckoning of Redis's clock read
 * again, as its boot and each of its sweeps do.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';
import { Scheduler } from '../../src/schedules/scheduler.js';
import { fireSessionId } from '../../src/schedules/keys.js';
import { asReplica, skewed } from '../helpers/skewed-clock.js';

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

  it('a replica ahead creates an `at` still to come in Redis’s clock, and it fires', async () => {
    const at = (await redisNow()) + 3_000;
    // 10 minutes ahead, `at` is past by the replica's clock (more than 60 s: the create was refused).
    const made = await asReplica(h.service.app, SKEW_MS, () =>
      a.post('/v1/schedules', { at: iso(at), session: { input: 'soon' } }),
    );
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.equal(made.body.next_run_at, iso(at));
    const id = made.body.id as string;
    await until(async () => (await a.get(`/v1/schedules/${id}`)).body.fires === 1, 30_000, 'the fire');
  });

  it('a replica ahead resumes an `at` still to come in Redis’s clock, and it fires', async () => {
    const at = (await redisNow()) + 3_000;
    const paused = await a.post('/v1/schedules', {
      at: iso(at),
      paused: true,
      session: { input: 'soon too' },
    });
    assert.equal(paused.status, 201, JSON.stringify(paused.body));
    // Resumed 10 minutes ahead: its one fire is still to come (the resume dropped it as missed while paused).
    const id = paused.body.id as string;
    const resumed = await asReplica(h.service.app, SKEW_MS, () =>
      a.req('PATCH', `/v1/schedules/${id}`, { paused: false }),
    );
    assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
    assert.equal(resumed.body.next_run_at, iso(at));
    await until(async () => (await a.get(`/v1/schedules/${id}`)).body.fires === 1, 30_000, 'the fire');
  });

  it('a replica behind resuming a cron makes its next fire the next one in Redis’s clock (no burst)', async () => {
    const made = await a.post('/v1/schedules', {
      cron: '* * * * *',
      paused: true,
      session: { input: 'minutely' },
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const before = await redisNow();
    const resumed = await asReplica(h.service.app, -SKEW_MS, () =>
      a.req('PATCH', `/v1/schedules/${made.body.id}`, { paused: false }),
    );
    assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
    const next = Date.parse(resumed.body.next_run_at as string);
    // Ten minutes behind, the next minute was ten minutes ago: each minute since would have fired one by one.
    assert.ok(
      next > before && next <= before + 61_000,
      `next_run_at ${iso(next)}, Redis's now ${iso(before)}`,
    );
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
