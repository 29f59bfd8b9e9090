import { Cron } from 'croner';

/**
 * When a schedule fires: a cron matches wall-clock times of its IANA time zone (croner matches them, on a timeline of
 * wall-clock times written as UTC), and each wall-clock time is then placed in real time. A time that does not exist
 * (a spring-forward gap) fires at the first instant after the gap — once, however many times of the gap match — and
 * a time that exists twice (a fall-back hour) fires at its first occurrence only. A cron has 5 fields (minute
 * precision, so fires are at least a minute apart); with `seconds` (SCHEDULES_TEST_SECONDS, tests only) 6 fields,
 * the first being seconds.
 */

export interface Timing {
  cron: string | null;
  at: number | null;
  timezone: string;
}

/**
 * Whether `tz` is an IANA time zone this runtime knows (any letter case, as Intl takes it; kept as given). An offset
 * (`+02:00`, `-0500`), which Intl takes as a zone too, is none: the contract's `timezone` is an IANA name. (The
 * fixed-offset zones IANA itself has, `Etc/GMT+2` and the like, are.)
 */
export function isIanaTimezone(tz: string): boolean {
  try {
    const resolved = new Intl.DateTimeFormat('en-US', { timeZone: tz }).resolvedOptions().timeZone;
    return !resolved.startsWith('+') && !resolved.startsWith('-');
  } catch {
    return false;
  }
}

/** The reason a cron expression is refused, or null when croner accepts it with the allowed number of fields. */
export function cronProblem(expr: string, timezone: string, seconds: boolean): string | null {
  const fields = expr.trim().split(/\s+/).length;
  if (fields !== 5 && !(seconds && fields === 6)) return 'a cron expression has 5 fields';
  const outOfRange = numberOutOfRange(expr.trim().split(/\s+/));
  if (outOfRange) return outOfRange;
  try {
    const c = build(expr, timezone);
    if (c.nextRun(new Date()) === null) return 'the cron expression never fires';
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

/** Each field's name and the numbers it takes, minute to day of week (a 6-field cron starts with seconds). */
const FIELD_RANGES: ReadonlyArray<readonly [string, number, number]> = [
  ['minute', 0, 59],
  ['hour', 0, 23],
  ['day of month', 1, 31],
  ['month', 1, 12],
  ['day of week', 0, 7],
];

/**
 * The first number of a field outside its range, said in the cron's own terms (croner counts days and months from
 * 0 and names `0 0 0 * *`'s day -1). Only plain numbers of lists, ranges and steps' starts are looked at; names,
 * `L`, `W` and `#` are left to croner.
 */
function numberOutOfRange(fields: string[]): string | null {
  const ranges = fields.length === 6 ? [['second', 0, 59] as const, ...FIELD_RANGES] : FIELD_RANGES;
  for (let i = 0; i < ranges.length; i++) {
    const [name, min, max] = ranges[i]!;
    for (const part of (fields[i] ?? '').split(',')) {
      for (const piece of (part.split('/')[0] ?? '').split('-')) {
        // `15W`: the weekday nearest the 15th (day of month), whose number croner also names counted from 0.
        const n = name === 'day of month' && /^\d+W$/i.test(piece) ? piece.slice(0, -1) : piece;
        if (!/^\d+$/.test(n)) continue;
        const v = Number(n);
        if (v < min || v > max) return `the ${name} ${n} is not in ${min}-${max}`;
      }
    }
  }
  return null;
}

/**
 * Day of month and day of week as Vixie cron joins them: either day (OR) when both are restricted, both (AND) when
 * either starts with `*` — so `0 0 *\/10 * 5` is a Friday that is the 1st, 11th, 21st or 31st, where croner's OR
 * alone fires on every Friday too.
 */
function build(expr: string, timezone: string): Cron {
  const fields = expr.trim().split(/\s+/);
  const wild = (f: string | undefined) => f !== undefined && (f.startsWith('*') || f.startsWith('?'));
  const domAndDow = wild(fields[fields.length - 3]) || wild(fields[fields.length - 1]);
  return new Cron(expr, {
    timezone,
    paused: true,
    mode: fields.length === 6 ? '6-part' : '5-part',
    domAndDow,
  });
}

/** Matched wall-clock times looked at, at most, for one fire (a cron matching only in gaps or repeated hours). */
const MAX_CANDIDATES = 1000;
const DAY_MS = 86_400_000;

const formats = new Map<string, Intl.DateTimeFormat>();

/** The wall-clock time of instant `ms` in `tz`, written as a UTC time (ms). */
function wallOf(ms: number, tz: string): number {
  let f = formats.get(tz);
  if (!f) {
    if (formats.size > 1000) formats.clear();
    f = new Intl.DateTimeFormat('en-US', {
      timeZone: tz,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    });
    formats.set(tz, f);
  }
  const p: Record<string, number> = {};
  for (const part of f.formatToParts(ms)) if (part.type !== 'literal') p[part.type] = Number(part.value);
  const whole = Date.UTC(p['year']!, p['month']! - 1, p['day']!, p['hour'], p['minute'], p['second']);
  return whole + (((ms % 1000) + 1000) % 1000);
}

/**
 * The instant wall-clock time `wall` stands for in `tz`: its first occurrence, or, for a time in a gap, the first
 * instant after the gap.
 */
function instantOf(wall: number, tz: string): number {
  const before = wallOf(wall - DAY_MS, tz) - (wall - DAY_MS);
  const after = wallOf(wall + DAY_MS, tz) - (wall + DAY_MS);
  // The offsets a day either side cover any transition near `wall`; the earlier instant is the first occurrence.
  const found = [wall - before, wall - after].filter((t) => wallOf(t, tz) === wall).sort((a, b) => a - b);
  if (found.length > 0) return found[0]!;
  // In a gap: the first instant whose wall-clock time is past `wall`, between the two readings (to the second).
  let lo = Math.min(wall - before, wall - after);
  let hi = Math.max(wall - before, wall - after);
  while (hi - lo > 1000) {
    const mid = lo + Math.floor((hi - lo) / 2000) * 1000;
    if (wallOf(mid, tz) > wall) hi = mid;
    else lo = mid;
  }
  return hi;
}

/** The first fire strictly after `afterMs`, or null when there is none (a one-shot `at` fired, a cron ended). */
export function nextFire(t: Timing, afterMs: number): number | null {
  if (t.at !== null) return t.at > afterMs ? t.at : null;
  const cron = build(t.cron ?? '', 'Etc/UTC');
  let wall = wallOf(afterMs, t.timezone);
  for (let i = 0; i < MAX_CANDIDATES; i++) {
    const next = cron.nextRun(new Date(wall));
    if (!next) return null;
    wall = next.getTime();
    const at = instantOf(wall, t.timezone);
    // A time already passed in real time: the second occurrence of a repeated hour's time, or a gap's time whose
    // instant (the gap's end) fired already.
    if (at > afterMs) return at;
  }
  return null;
}

/**
 * The fire to run now for a schedule due at `dueMs` (≤ now): the newest time ≤ now not before `dueMs`, so after an
 * outage the missed fires collapse into one, late.
 */
export function newestMissed(t: Timing, dueMs: number, nowMs: number): number {
  if (t.at !== null || t.cron === null) return dueMs;
  const cron = build(t.cron, 'Etc/UTC');
  let wall = wallOf(nowMs, t.timezone) + 1;
  for (let i = 0; i < MAX_CANDIDATES; i++) {
    const prev = cron.previousRuns(1, new Date(wall))[0];
    if (!prev || prev.getTime() <= wallOf(dueMs, t.timezone) - DAY_MS) break;
    wall = prev.getTime();
    const at = instantOf(wall, t.timezone);
    if (at <= nowMs) return at > dueMs ? at : dueMs;
  }
  return dueMs;
}
