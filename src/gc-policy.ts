import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';

/**
 * V8's old-generation growth step by what the process is doing.
 *
 * `npm start` runs node with `--heap-growing-percent=30`: after each full GC the heap may grow 30 % before the next
 * one, where V8's own factor is up to 4× for a small heap. That keeps the footprint of an idle replica small
 * (docs/BENCHMARKS.md B6: ≤ 200 MB with 10,000 sessions and 5,000 connections). Under a run load it costs CPU: a
 * streamed iteration allocates ~0.5 MB, and with 30 % steps B2's load (200 runs at once) made 7 full mark-compacts
 * per 1,000 iterations where V8's default makes 2, about 0.3 ms of the service's CPU per iteration.
 *
 * So the step follows the runs this process drives: from BUSY_RUNS active runs on, V8's own factor (the flag at 0,
 * which V8 reads as "unset" at each full GC); once no run is active, the start flag's value again. An idle process,
 * and one whose sessions only wait (B6 creates them without starting them), never leaves the start flag's step; a
 * busy one holds more garbage between full GCs (its peak RSS grows, up to V8's default behaviour), which the next
 * full GC after the runs end collects under the small step again.
 *
 * Only where the flag was given on node's command line (`process.execArgv`): without it V8's default applies always,
 * and this does nothing. V8 reads `heap_growing_percent` when it sizes the heap after a full GC, so setting it at run
 * time (node's `v8.setFlagsFromString`, which node allows after start) takes effect from the next full GC on.
 */

/** Active runs from which the process counts as busy (a handful of runs allocate too little to matter). */
export const BUSY_RUNS = 8;
/** How often the policy looks at the run count (ms): growth matters over seconds, not per run. */
export const CHECK_MS = 500;

/** The `--heap-growing-percent=N` of node's command line, or null when it was not given (or is 0). */
export function startGrowingPercent(execArgv: readonly string[] = process.execArgv): number | null {
  let percent: number | null = null;
  for (const arg of execArgv) {
    const m = /^--heap[-_]growing[-_]percent=(\d+)$/.exec(arg);
    if (m) percent = Number(m[1]);
  }
  return percent && percent > 0 ? percent : null;
}

/** A check run every CHECK_MS on an unref'd timer (it keeps no process alive). */
abstract class PeriodicCheck {
  private timer: NodeJS.Timeout | null = null;

  abstract check(): void;

  start(): this {
    this.timer ??= setInterval(() => this.check(), CHECK_MS).unref();
    return this;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}

export class GcPolicy extends PeriodicCheck {
  /** The step now in force: the start flag's (`idle`) or V8's own (`busy`). */
  mode: 'idle' | 'busy' = 'idle';
  /** Switches made (for tests and the log). */
  switches = 0;

  constructor(
    /** The start flag's percent: the idle step. */
    private readonly idlePercent: number,
    /** Runs this process drives now. */
    private readonly activeRuns: () => number,
    /** Applies a V8 flag (node's `v8.setFlagsFromString`; a test passes its own). */
    private readonly setFlag: (flag: string) => void = setFlagsFromString,
  ) {
    super();
  }

  /** Looks at the run count now and switches the step if it crossed a bound (BUSY_RUNS up, 0 down). */
  override check(): void {
    const runs = this.activeRuns();
    if (this.mode === 'idle' && runs >= BUSY_RUNS) this.apply('busy', 0);
    else if (this.mode === 'busy' && runs === 0) this.apply('idle', this.idlePercent);
  }

  private apply(mode: 'idle' | 'busy', percent: number): void {
    this.setFlag(`--heap-growing-percent=${percent}`);
    this.mode = mode;
    this.switches++;
  }

  /** Stops checking and puts the start flag's step back. */
  override stop(): void {
    super.stop();
    if (this.mode === 'busy') this.apply('idle', this.idlePercent);
  }
}

/** Growth of V8's heap (`heapTotal`, bytes) since the last trim past which an idle process trims again. */
export const TRIM_GROWTH_BYTES = 24 * 1024 * 1024;
/** Live heap (`heapUsed`, bytes) above which no trim is made: its collection would stop the loop for too long. */
export const TRIM_MAX_USED_BYTES = 192 * 1024 * 1024;
/** Event-loop utilization (0..1) over one check below which the process counts as quiet. */
export const QUIET_ELU = 0.05;
/** Quiet checks in a row (CHECK_MS each) before a trim: the process has been idle for ~1 s. */
export const QUIET_CHECKS = 2;

/** V8's heap: its size and what is in use (bytes). */
export interface HeapSize {
  total: number;
  used: number;
}

/** What the idle trim reads and does: the runtime's own (`IdleTrim.fromRuntime`), or a test's. */
export interface TrimProbe {
  /** Event-loop utilization since the previous call (0..1). */
  utilization(): number;
  heap(): HeapSize;
  /** The collection that gives memory back. */
  collect(): void;
}

/** The `gc` function node's `--expose-gc` puts on the global object (V8's options), or none. */
type ExposedGc = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

const heapNow = (): HeapSize => {
  const m = process.memoryUsage();
  return { total: m.heapTotal, used: m.heapUsed };
};

/**
 * The idle trim: once a process with no active run has been quiet for QUIET_CHECKS checks and its heap grew by
 * TRIM_GROWTH_BYTES since the last trim, one last-resort collection (V8's `CollectAllAvailableGarbage`, what V8 does
 * under memory pressure: full collections until nothing more is freed, the young generation shrunk, pages given
 * back). V8's own collections keep what a burst grew — the young generation at its largest (two 16 MB semi-spaces)
 * and old-space pages — and a plain major collection gives back almost nothing, so an idle replica stayed near its
 * peak: 142 MB of RSS right after boot (97 MB after a trim), 190–215 MB in B6 (docs/BENCHMARKS.md).
 *
 * It stops the loop while it runs (~50 ms for the heap after boot, ~230 ms with 90 MB in use): so only when quiet,
 * with no run streaming, at most once per growth, and never with more than TRIM_MAX_USED_BYTES in use. Only where
 * `npm start` gave `--expose-gc` (the collection is V8's `gc`); elsewhere `fromRuntime` returns null.
 */
export class IdleTrim extends PeriodicCheck {
  private quiet = 0;
  /** `heapTotal` right after the last trim (0 before the first: the heap the boot grew counts as growth). */
  private trimmedAt = 0;

  constructor(
    /** Runs this process drives now. */
    private readonly activeRuns: () => number,
    private readonly probe: TrimProbe,
    /** Told of each trim: the heap before and after. */
    private readonly onTrim: (before: HeapSize, after: HeapSize) => void = () => {},
  ) {
    super();
  }

  /** The trim with V8's `gc` (exposed by `--expose-gc`), or null when the process was started without it. */
  static fromRuntime(
    activeRuns: () => number,
    onTrim?: (before: HeapSize, after: HeapSize) => void,
  ): IdleTrim | null {
    const gc = (globalThis as { gc?: ExposedGc }).gc;
    if (typeof gc !== 'function') return null;
    let last = performance.eventLoopUtilization();
    const probe: TrimProbe = {
      utilization: () => {
        const now = performance.eventLoopUtilization();
        const u = performance.eventLoopUtilization(now, last).utilization;
        last = now;
        return u;
      },
      heap: heapNow,
      collect: () => gc({ type: 'major', execution: 'sync', flavor: 'last-resort' }),
    };
    return new IdleTrim(activeRuns, probe, onTrim);
  }

  /** Counts a quiet check (or resets the count) and trims once the process has been quiet long enough. */
  override check(): void {
    const quiet = this.activeRuns() === 0 && this.probe.utilization() < QUIET_ELU;
    this.quiet = quiet ? this.quiet + 1 : 0;
    if (this.quiet < QUIET_CHECKS) return;
    const before = this.probe.heap();
    if (before.total - this.trimmedAt < TRIM_GROWTH_BYTES || before.used > TRIM_MAX_USED_BYTES) return;
    this.probe.collect();
    const after = this.probe.heap();
    this.quiet = 0;
    this.trimmedAt = after.total;
    this.onTrim(before, after);
  }
}
