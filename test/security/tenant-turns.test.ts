/**
 * src/tenant-turns.ts: a tenant makes at most one heavy step per turn of the event loop, its others wait in its line
 * (FIFO) for later turns, and another tenant's steps do not wait for that line. Turns are counted here by a chain of
 * setImmediate callbacks (one per check phase, where the lines are served); no timers, no sleeps.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { heavyStep } from '../../src/tenant-turns.js';

/** Counts check phases (turns of the loop) until `stop()`: `now()` is the current turn's number. */
function turnCounter() {
  let n = 0;
  let running = true;
  const tick = () => {
    n++;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  return {
    now: () => n,
    stop: () => {
      running = false;
    },
  };
}

describe('tenant turns', () => {
  it("makes one heavy step of a tenant per turn, in order; another tenant's steps do not wait", async () => {
    const turns = turnCounter();
    try {
      // In one synchronous stretch (one turn): acme's first step at once, its next three in its line; globex's
      // first at once too (acme's line is not globex's).
      assert.equal(heavyStep('acme'), undefined);
      const waits = [heavyStep('acme'), heavyStep('acme'), heavyStep('acme')];
      assert.equal(heavyStep('globex'), undefined);
      const order: string[] = [];
      const at = await Promise.all(
        waits.map(async (w, i) => {
          assert.ok(w instanceof Promise, `acme's step ${i + 2} waits`);
          await w;
          order.push(`acme ${i + 2}`);
          return turns.now();
        }),
      );
      assert.deepEqual(order, ['acme 2', 'acme 3', 'acme 4']);
      // One per turn: each in a later turn than the one before, none in the turn of the first step (turn 0).
      assert.ok(at[0]! >= 1 && at[1]! > at[0]! && at[2]! > at[1]!, `turns ${at.join(', ')}`);
      // Work-conserving: the line moved on at every turn (no turn of the loop skipped by it).
      assert.ok(at[2]! - at[0]! <= 3, `turns ${at.join(', ')}`);
    } finally {
      turns.stop();
    }
  });

  it('lets a step that comes after its line has emptied run at once, once its tenant made none in the turn', async () => {
    assert.equal(heavyStep('initech'), undefined);
    const next = heavyStep('initech');
    assert.ok(next instanceof Promise);
    await next;
    // The step just made counts in this turn: one more waits.
    const third = heavyStep('initech');
    assert.ok(third instanceof Promise);
    await third;
    // A turn later with no step of initech's in it: at once.
    await new Promise<void>((resolve) => setImmediate(resolve));
    await new Promise<void>((resolve) => setImmediate(resolve));
    assert.equal(heavyStep('initech'), undefined);
  });
});
