import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  BUSY_RUNS,
  GcPolicy,
  IdleTrim,
  QUIET_CHECKS,
  QUIET_ELU,
  TRIM_GROWTH_BYTES,
  TRIM_MAX_USED_BYTES,
  startGrowingPercent,
  type HeapSize,
} from '../../src/gc-policy.js';
import { serviceEnv, spawnService, startFlags } from '../helpers/process.js';
import { startFakeAnthropic } from '../fake/server.js';
import { startTestRedis } from '../helpers/redis.js';

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

const MB = 1024 * 1024;

/** An IdleTrim on a scripted runtime: the test sets the runs, the loop's utilization and the heap. */
function scripted() {
  const rt = { runs: 0, elu: 0, total: 100 * MB, used: 30 * MB, afterTotal: 40 * MB, collected: 0 };
  const trims: Array<[HeapSize, HeapSize]> = [];
  const trim = new IdleTrim(
    () => rt.runs,
    {
      utilization: () => rt.elu,
      heap: () => ({ total: rt.total, used: rt.used }),
      collect: () => {
        rt.collected++;
        rt.total = rt.afterTotal;
      },
    },
    (before, after) => trims.push([before, after]),
  );
  const checks = (n: number) => {
    for (let i = 0; i < n; i++) trim.check();
  };
  return { rt, trim, trims, checks };
}

describe('idle trim: memory given back once the process is quiet (src/gc-policy.ts IdleTrim)', () => {
  it('trims after QUIET_CHECKS quiet checks, then only once the heap grew TRIM_GROWTH_BYTES again', () => {
    const { rt, trims, checks } = scripted();
    checks(QUIET_CHECKS - 1);
    assert.equal(rt.collected, 0, 'not quiet long enough yet');
    checks(1);
    assert.equal(rt.collected, 1);
    assert.deepEqual(trims, [
      [
        { total: 100 * MB, used: 30 * MB },
        { total: 40 * MB, used: 30 * MB },
      ],
    ]);
    // Quiet on, the heap as the trim left it: nothing more to give back.
    checks(10 * QUIET_CHECKS);
    assert.equal(rt.collected, 1);
    rt.total = 40 * MB + TRIM_GROWTH_BYTES - 1;
    checks(QUIET_CHECKS);
    assert.equal(rt.collected, 1, 'grown by less than TRIM_GROWTH_BYTES');
    rt.total = 40 * MB + TRIM_GROWTH_BYTES;
    checks(QUIET_CHECKS);
    assert.equal(rt.collected, 2);
  });

  it('never trims while a run is active or the loop is busy, and a busy check starts the count again', () => {
    const { rt, checks } = scripted();
    rt.runs = 1;
    checks(10 * QUIET_CHECKS);
    assert.equal(rt.collected, 0, 'a run is active');
    rt.runs = 0;
    rt.elu = QUIET_ELU;
    checks(10 * QUIET_CHECKS);
    assert.equal(rt.collected, 0, 'the loop is busy');
    rt.elu = 0;
    checks(QUIET_CHECKS - 1);
    rt.elu = 0.5;
    checks(1);
    rt.elu = 0;
    checks(QUIET_CHECKS - 1);
    assert.equal(rt.collected, 0, 'the busy check reset the count');
    checks(1);
    assert.equal(rt.collected, 1);
  });

  it('never trims a heap with more than TRIM_MAX_USED_BYTES in use (its collection would stop the loop too long)', () => {
    const { rt, checks } = scripted();
    rt.used = TRIM_MAX_USED_BYTES + 1;
    rt.total = TRIM_MAX_USED_BYTES + 64 * MB;
    checks(10 * QUIET_CHECKS);
    assert.equal(rt.collected, 0);
  });

  it('is off where node was started without --expose-gc', (t) => {
    if (typeof (globalThis as { gc?: unknown }).gc === 'function') return t.skip('this test process has gc');
    assert.equal(
      IdleTrim.fromRuntime(() => 0),
      null,
    );
  });

  it('the service started as `npm start` starts it gives memory back once idle after boot', async () => {
    assert.ok(startFlags().includes('--expose-gc'), `npm start's flags: ${startFlags().join(' ')}`);
    const redis = await startTestRedis();
    const fake = await startFakeAnthropic();
    const svc = await spawnService(serviceEnv(redis.url, fake.url, { LOG_LEVEL: 'debug' }), {
      name: 'idle-trim',
      nodeArgs: startFlags(),
    });
    try {
      const status = (field: string) =>
        Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${svc.pid}/status`, 'utf8'))![1]) *
        1024;
      const line = await svc.waitForLog((l) => l['msg'] === 'idle: memory given back', 30_000);
      const [before, after] = [line['heap_bytes_before'] as number, line['heap_bytes_after'] as number];
      // What the boot grew (~95 MB of heap) mostly given back (~53 MB left) …
      assert.ok(after < before - 16 * MB, `heap ${before} -> ${after} bytes`);
      // … and to the system, not only inside V8's heap: RSS well under its peak.
      const [rss, peak] = [status('VmRSS'), status('VmHWM')];
      assert.ok(rss < peak - 10 * MB, `RSS ${rss} bytes after the trim, peak ${peak}`);
      console.log('RSSX', rss, peak);
    } finally {
      await svc.stop();
      await fake.close();
      await redis.stop();
    }
  });
});
