import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { listChunk } from '../../src/store/session-index.js';

const MiB = { maxBytes: 1_048_576 };

describe('listChunk: how many sessions a list round reads next', () => {
  it('without a byte bound, all that is left', () => {
    assert.equal(listChunk(100, 0, 0, 0), 100);
  });

  it('while none is kept, as many as were read: two first, then doubling (never the rest at once, never one by one)', () => {
    assert.equal(listChunk(100, 0, 0, 0, MiB), 2);
    // Two read and dropped (gone, filtered out): before, 0 bytes for 2 read made the next round all 98 left.
    assert.equal(listChunk(98, 2, 0, 0, MiB), 2);
    assert.equal(listChunk(96, 4, 0, 0, MiB), 4);
    assert.equal(listChunk(92, 8, 0, 0, MiB), 8);
    assert.equal(listChunk(5, 64, 0, 0, MiB), 5);
    // A page of 100 dropped sessions: 2+2+4+8+16+32+36, seven rounds.
    let rounds = 0;
    for (let read = 0; read < 100; rounds++) read += listChunk(100 - read, read, 0, 0, MiB);
    assert.equal(rounds, 7);
  });

  it('once some are kept, the room left at their size, whatever was dropped before them', () => {
    // Two gone, then one kept of 400 kB: the room (~648 kB) holds two more of its size, not five (400 kB / 3 read).
    assert.equal(listChunk(97, 3, 1, 400_000, MiB), 2);
    // Small sessions: the rest.
    assert.equal(listChunk(90, 10, 10, 10_000, MiB), 90);
    // Past the bound: one (the page stops at it).
    assert.equal(listChunk(50, 3, 3, 1_200_000, MiB), 1);
  });
});
