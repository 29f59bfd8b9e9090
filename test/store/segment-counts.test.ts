/**
 * `segmentFor`: where a read of message `from` of a session's whole record starts its walk of the kept segments, from
 * meta `seg_counts` (`<index> <start> <count> …`, apply-8.lua `compact`): the counted segment that holds it, the one
 * after the run when the segments past it were pushed without counts (an older version's), and the first segment
 * (null) when nothing tells.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { segmentFor } from '../../src/store/store.js';

test('segmentFor finds the segment holding a message, or says nothing', () => {
  // Segments 0, 1, 2 of 8, 3 and 3 messages: 0–7, 8–10, 11–13.
  const all = '0 0 8 3 3';
  assert.deepEqual(segmentFor(all, 0), { index: 0, start: 0 });
  assert.deepEqual(segmentFor(all, 7), { index: 0, start: 0 });
  assert.deepEqual(segmentFor(all, 8), { index: 1, start: 8 });
  assert.deepEqual(segmentFor(all, 13), { index: 2, start: 11 });
  // Past the run: the segment after it, counted on from there.
  assert.deepEqual(segmentFor(all, 14), { index: 3, start: 14 });
  // A run that begins at segment 2 (0 and 1 pushed by an older version): before it, nothing is known.
  const late = '2 11 3 4';
  assert.equal(segmentFor(late, 10), null);
  assert.deepEqual(segmentFor(late, 11), { index: 2, start: 11 });
  assert.deepEqual(segmentFor(late, 14), { index: 3, start: 14 });
  // A fork's run: its history began at message 6 of its source's record, and it keeps nothing before (segment 0 at
  // 6, which holds none of them: a walk from message 0 would take segment 0's messages for messages 0–3).
  const fork = '0 6 4';
  assert.deepEqual(segmentFor(fork, 3), { index: 0, start: 6 });
  assert.deepEqual(segmentFor(fork, 7), { index: 0, start: 6 });
  assert.deepEqual(segmentFor(fork, 10), { index: 1, start: 10 });
  // A segment of no message is passed over.
  assert.deepEqual(segmentFor('0 0 2 0 2', 2), { index: 2, start: 2 });
  for (const field of [null, '', '3', '0 0 x', '0 0 1,2', ' 0 0 1'])
    assert.equal(segmentFor(field, 0), null, String(field));
});
