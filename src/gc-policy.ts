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

export class GcPolicy {
  /** The step now in force: the start flag's (`idle`) or V8's own (`busy`). */
  mode: 'idle' | 'busy' = 'idle';
  /** Switches made (for tests and the log). */
  switches = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    /** The start flag's percent: the idle step. */
    private readonly idlePercent: number,
    /** Runs this process drives now. */
    private readonly activeRuns: () => number,
    /** Applies a V8 flag (node's `v8.setFlagsFromString`; a test passes its own). */
    private readonly setFlag: (flag: string) => void = setFlagsFromString,
  ) {}

  /** Looks at the run count now and switches the step if it crossed a bound (BUSY_RUNS up, 0 down). */
  check(): void {
    const runs = this.activeRuns();
    if (this.mode === 'idle' && runs >= BUSY_RUNS) this.apply('busy', 0);
    else if (this.mode === 'busy' && runs === 0) this.apply('idle', this.idlePercent);
  }

  private apply(mode: 'idle' | 'busy', percent: number): void {
    this.setFlag(`--heap-growing-percent=${percent}`);
    this.mode = mode;
    this.switches++;
  }

  /** Checks every CHECK_MS (an unref'd timer: it keeps no process alive). */
  start(): this {
    this.timer ??= setInterval(() => this.check(), CHECK_MS).unref();
    return this;
  }

  /** Stops checking and puts the start flag's step back. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.mode === 'busy') this.apply('idle', this.idlePercent);
  }
}
