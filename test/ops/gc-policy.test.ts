import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BUSY_RUNS, GcPolicy, startGrowingPercent } from '../../src/gc-policy.js';

describe('GC policy: the heap growth step follows the active runs (src/gc-policy.ts)', () => {
  it('reads the start flag from node’s command line, or none', () => {
    assert.equal(startGrowingPercent(['--max-semi-space-size=16', '--heap-growing-percent=30']), 30);
    assert.equal(startGrowingPercent(['--heap_growing_percent=45']), 45);
    assert.equal(startGrowingPercent(['--max-semi-space-size=16']), null);
    assert.equal(startGrowingPercent(['--heap-growing-percent=0']), null);
    assert.equal(startGrowingPercent([]), null);
  });

  it('switches to V8’s own step from BUSY_RUNS active runs and back to the start flag’s once none is active', () => {
    let runs = 0;
    const flags: string[] = [];
    const p = new GcPolicy(
      30,
      () => runs,
      (f) => flags.push(f),
    );
    p.check();
    assert.deepEqual(flags, [], 'idle: nothing set');
    runs = BUSY_RUNS - 1;
    p.check();
    assert.equal(p.mode, 'idle');
    runs = BUSY_RUNS;
    p.check();
    assert.equal(p.mode, 'busy');
    assert.deepEqual(flags, ['--heap-growing-percent=0']);
    // Hysteresis: a few runs left keep the busy step (no switch per run ending).
    runs = 1;
    p.check();
    p.check();
    assert.equal(p.mode, 'busy');
    runs = 0;
    p.check();
    assert.equal(p.mode, 'idle');
    assert.deepEqual(flags, ['--heap-growing-percent=0', '--heap-growing-percent=30']);
    assert.equal(p.switches, 2);
  });

  it('stop() puts the start flag’s step back', () => {
    let runs = BUSY_RUNS;
    const flags: string[] = [];
    const p = new GcPolicy(
      30,
      () => runs,
      (f) => flags.push(f),
    );
    p.start();
    p.check();
    runs = BUSY_RUNS + 1;
    p.stop();
    assert.equal(p.mode, 'idle');
    assert.deepEqual(flags, ['--heap-growing-percent=0', '--heap-growing-percent=30']);
  });

  it('node accepts the flag at run time (what the policy calls)', async () => {
    const { setFlagsFromString } = await import('node:v8');
    assert.doesNotThrow(() => setFlagsFromString('--heap-growing-percent=0'));
  });
});
