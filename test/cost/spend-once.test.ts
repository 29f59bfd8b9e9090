/**
 * The tenant's day counts a marked turn (its session and seq: src/cost/spend.ts `SpendMark`) once, however many
 * times it is recorded (its run's record, the takeover's, the runs' sweep's), in one script call per day's hash for
 * the turns of one event-loop turn, as before; an unmarked turn (a deleted session's) is added each time. A session's
 * open turns (its `spend_open` list) are recorded in seq order, one script call per day, stopping at a failure.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { PriceTable } from '../../src/cost/prices.js';
import {
  OpenSpendNotRecorded,
  TenantSpend,
  parseOpenSpend,
  openSpendTail,
  type SpendIncr,
} from '../../src/cost/spend.js';

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
    assert.deepEqual(open, [{ seq: 12, day: DAY, incr: turn(4) }]);
    assert.deepEqual(parseOpenSpend('12|garbage'), []);
    assert.deepEqual(parseOpenSpend(null), []);
    assert.equal(await spend.recordOpen('c', 's1', open), 12);
    assert.equal(await spend.recordOpen('c', 's1', open), 12);
    assert.equal((await day('c'))['in'], '4');
    // Past the retention: not written, and counted as recorded (its run's end drops it).
    assert.equal(await spend.recordOpen('c', 's2', [{ ...open[0]!, day: '2026-03-01' }]), 12);
    assert.equal(await r.exists('q:{c}:usage:2026-03-01'), 0);
  });

  it('a list of open turns: seq order, malformed entries skipped; one script call per day, in order, each once', async () => {
    const tail = (n: number, day = NOW) => openSpendTail(turn(n), day);
    const DAY2 = NOW + 86_400_000;
    const raw = [
      `7|${tail(2)}`,
      'junk',
      `3|${tail(1)}`,
      `9|2026-05-01|1,2`,
      `11|${tail(4, DAY2)}`,
      `10|${tail(3)}`,
    ];
    const open = parseOpenSpend(raw.join(';'));
    assert.deepEqual(
      open.map((o) => [o.seq, o.day, o.incr.in]),
      [
        [3, DAY, 1],
        [7, DAY, 2],
        [10, DAY, 3],
        [11, '2026-05-02', 4],
      ],
    );
    const calls: string[] = [];
    const monitor = await r.duplicate().monitor();
    monitor.on('monitor', (_t: string, args: string[]) => {
      if (args[0]?.toLowerCase().startsWith('eval')) calls.push(args.join(' '));
    });
    // Sent twice (a record that landed though its answer was lost, sent again): each turn once.
    assert.equal(await spend.recordOpen('d', 's1', open), 11);
    assert.equal(await spend.recordOpen('d', 's1', open), 11);
    await r.ping();
    monitor.disconnect();
    assert.deepEqual(await day('d'), { in: '6', out: '12', cr: '18', cost: '60' });
    assert.equal((await r.hgetall('q:{d}:usage:2026-05-02'))['in'], '4');
    assert.deepEqual(await r.hgetall('q:{d}:spent'), { s1: '11' });
    // Per record: one call for the three turns of the first day (in seq order: record-2.lua would refuse 3 after
    // 10), one for the second day's.
    assert.equal(calls.length, 4, calls.join('\n'));
  });

  it('a record that fails stops there: the turns recorded before it are told, none after', async () => {
    const open = parseOpenSpend(`5|${openSpendTail(turn(1), NOW)};6|${openSpendTail(turn(2), NOW)}`);
    await r.set('q:{e}:spent', 'not a hash');
    await assert.rejects(spend.recordOpen('e', 's1', open), (err: unknown) => {
      assert.ok(err instanceof OpenSpendNotRecorded);
      assert.equal(err.recorded, null);
      return true;
    });
    assert.deepEqual(await day('e'), {});
    // A past day before it counts as recorded; today's failed.
    const old = { seq: 4, day: '2026-03-01', incr: turn(9) };
    await assert.rejects(spend.recordOpen('e', 's1', [old, ...open]), (err: unknown) => {
      assert.ok(err instanceof OpenSpendNotRecorded);
      assert.equal(err.recorded, 4);
      return true;
    });
    await r.del('q:{e}:spent');
    assert.equal(await spend.recordOpen('e', 's1', [old, ...open]), 6);
    assert.equal((await day('e'))['in'], '3');
  });
});
