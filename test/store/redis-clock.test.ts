/**
 * src/redis/clock.ts: the process's reckoning of Redis's clock, set by the replies that carry Redis's now (the
 * sweeps' due reads) and by one TIME.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { RedisClock } from '../../src/redis/clock.js';
import { startTestRedis } from '../helpers/redis.js';

describe('RedisClock', () => {
  it('is Date.now() until it observes Redis, then Redis’s now as the reply said, half-way through its trip', () => {
    const real = Date.now;
    let t = 1_000_000;
    Date.now = () => t;
    try {
      const clock = new RedisClock();
      assert.equal(clock.now(), 1_000_000);
      // Sent at 1 000 000, answered at 1 000 040: Redis's 5 000 000 was taken at 1 000 020 of this clock.
      t = 1_000_040;
      clock.observe(5_000_000, 1_000_000);
      assert.equal(clock.now(), 5_000_020);
      t += 1_000;
      assert.equal(clock.now(), 5_001_020);
      // Without the send time, the reply's now is taken as now; a reply without one changes nothing.
      clock.observe(7_000_000);
      assert.equal(clock.now(), 7_000_000);
      clock.observe(Number('x'));
      assert.equal(clock.now(), 7_000_000);
      // A reply 2 s on its way whose TIME was taken at its end (Redis or this loop was stalled before) would move
      // the clock by 1 s, taken as half-way: it is not taken while the sample kept (round trip 0) is under 30 s
      // old; once that one is older, it is.
      t += 2_000;
      clock.observe(7_002_000, t - 2_000);
      assert.equal(clock.now(), 7_002_000);
      t += 30_000;
      clock.observe(7_032_000, t - 2_000);
      assert.equal(clock.now(), 7_033_000);
    } finally {
      Date.now = real;
    }
  });

  it('sync reads Redis’s TIME', async (t) => {
    const redis = await startTestRedis({ appendonly: false });
    t.after(() => redis.stop());
    const client = new Redis(redis.url);
    t.after(() => client.quit());
    const real = Date.now;
    const clock = new RedisClock();
    Date.now = () => real() + 600_000;
    try {
      await clock.sync(client);
      const [s, us] = await client.time();
      const redisNow = Number(s) * 1000 + Math.floor(Number(us) / 1000);
      assert.ok(Math.abs(clock.now() - redisNow) < 1_000, `${clock.now()} vs ${redisNow}`);
    } finally {
      Date.now = real;
    }
  });
});
