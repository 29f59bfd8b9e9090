import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CounterBatch } from '../../src/store/counter-batch.js';

describe('CounterBatch', () => {
  it('adds of one event-loop turn become one write per key, which settles each of them', async () => {
    const writes: Array<[string, Record<string, number>]> = [];
    const batch = new CounterBatch(async (key, sums) => {
      writes.push([key, Object.fromEntries(sums)]);
    });
    await Promise.all([
      batch.add('a', [
        ['in', 3],
        ['out', 0],
      ]),
      batch.add('a', [
        ['in', 2],
        ['cost', 7],
      ]),
      batch.add('b', [['in', 1]]),
    ]);
    assert.deepEqual(writes, [
      ['a', { in: 5, cost: 7 }],
      ['b', { in: 1 }],
    ]);
    // The next turn's adds are the next batch.
    await batch.add('a', [['in', 1]]);
    assert.deepEqual(writes.at(-1), ['a', { in: 1 }]);
  });

  it('a failed write rejects every add of its batch, and the next batch is written', async () => {
    let fail = true;
    const batch = new CounterBatch(async () => {
      if (fail) throw new Error('down');
    });
    const results = await Promise.allSettled([batch.add('a', [['n', 1]]), batch.add('a', [['n', 2]])]);
    assert.deepEqual(
      results.map((r) => r.status),
      ['rejected', 'rejected'],
    );
    fail = false;
    await batch.add('a', [['n', 1]]);
  });

  it('a write that throws at once rejects its batch', async () => {
    const batch = new CounterBatch(() => {
      throw new Error('no such command');
    });
    await assert.rejects(batch.add('a', [['n', 1]]), /no such command/);
  });
});
