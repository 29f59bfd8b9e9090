/**
 * The tenant's day counts a marked turn (its session and seq: src/cost/spend.ts `SpendMark`) once, however many
 * times it is recorded (its run's record, the takeover's, the runs' sweep's), in one script call per day's hash for
 * the turns of one event-loop turn, as before; an unmarked turn (a deleted session's) is added each time.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { PriceTable } from '../../src/cost/prices.js';
import { TenantSpend, parseOpenSpend, openSpendTail, type SpendIncr } from '../../src/cost/spend.js';

const NOW = Date.parse('2026-05-01T12:00:00Z');
const DAY = '2026-05-01';
const turn = (n: number): SpendIncr => ({ in: n, out: 2 * n, cw: 0, cr: 3 * n, cost: 10 * n, nc: 0 });

describe("a turn's spend is counted once per seq of its session", () => {
  let redis: TestRedis;
  let r: Redis;
  let spend: TenantSpend;
  before(async () => {
    redis = await startTestRedis({ appendonly: false });
    r = new Redis(redis.url);
    spend = new TenantSpend(r, {
      prices: new PriceTable(),
      capUsdPerDay: 0,
      retentionDays: 30,
      now: () => NOW,
    });
  });
  after(async () => {
    r?.disconnect();
    await redis?.stop();
  });
  const day = async (tenant: string) => r.hgetall(`q:{${tenant}}:usage:${DAY}`);

  it('a marked turn recorded again, or an older seq, adds nothing; one script call per flush', async () => {
    const calls: string[] = [];
    const monitor = await r.duplicate().monitor();
    monitor.on('monitor', (_t: string, args: string[]) => {
      if (args[0]?.toLowerCase().startsWith('eval')) calls.push(args.join(' '));
    });
    await Promise.all([
      spend.record('a', turn(1), { session: 's1', seq: 4, day: DAY }),
      spend.record('a', turn(2), { session: 's2', seq: 7, day: DAY }),
      spend.record('a', turn(100), { session: 's1', seq: 4, day: DAY }),
    ]);
    await spend.record('a', turn(1000), { session: 's1', seq: 3, day: DAY });
    await spend.record('a', turn(5), { session: 's1', seq: 9, day: DAY });
    await r.ping(); // MONITOR's lines of the commands before it have arrived
    monitor.disconnect();
    assert.deepEqual(await day('a'), { in: '8', out: '16', cr: '24', cost: '80' });
    assert.deepEqual(await r.hgetall('q:{a}:spent'), { s1: '9', s2: '7' });
    assert.equal(calls.length, 3, calls.join('\n'));
    // Kept as long as the day.
    assert.ok((await r.ttl('q:{a}:spent')) > 29 * 86_400);
  });

  it('an unmarked turn is added each time; a forgotten session counts from scratch', async () => {
    await spend.record('b', turn(1));
    await spend.record('b', turn(1));
    assert.equal((await day('b'))['in'], '2');
    await spend.record('b', turn(1), { session: 's9', seq: 5, day: DAY });
    await spend.forget('b', 's9');
    assert.deepEqual(await r.hgetall('q:{b}:spent'), {});
  });

  it('the open spend a commit writes reads back as it was; a day past the retention is not written again', async () => {
    const open = parseOpenSpend(`12|${openSpendTail(turn(4), NOW)}`);
    assert.deepEqual(open, { seq: 12, day: DAY, incr: turn(4) });
    assert.equal(parseOpenSpend('12|garbage'), null);
    await spend.recordOpen('c', 's1', open!);
    await spend.recordOpen('c', 's1', open!);
    assert.equal((await day('c'))['in'], '4');
    await spend.recordOpen('c', 's2', { ...open!, day: '2026-03-01' });
    assert.equal(await r.exists('q:{c}:usage:2026-03-01'), 0);
  });
});
