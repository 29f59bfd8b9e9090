import { Cron } from 'croner';

/**
 * When a schedule fires, from croner (DST-correct, IANA time zones). A cron has 5 fields (minute precision, so
 * fires are at least a minute apart); with `seconds` (SCHEDULES_TEST_SECONDS, tests only) 6 fields, the first
 * being seconds.
 */

export interface Timing {
  cron: string | null;
  at: number | null;
  timezone: string;
}

/** Whether `tz` is an IANA time zone this runtime knows. */
export function validTimezone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

/** The reason a cron expression is refused, or null when croner accepts it with the allowed number of fields. */
export function cronProblem(expr: string, timezone: string, seconds: boolean): string | null {
  const fields = expr.trim().split(/\s+/).length;
  if (fields !== 5 && !(seconds && fields === 6)) return 'a cron expression has 5 fields';
  try {
    const c = build(expr, timezone);
    if (c.nextRun(new Date()) === null) return 'the cron expression never fires';
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

function build(expr: string, timezone: string): Cron {
  const fields = expr.trim().split(/\s+/).length;
  return new Cron(expr, { timezone, paused: true, mode: fields === 6 ? '6-part' : '5-part' });
}

/** The first fire strictly after `afterMs`, or null when there is none (a one-shot `at` fired, a cron ended). */
export function nextFire(t: Timing, afterMs: number): number | null {
  if (t.at !== null) return t.at > afterMs ? t.at : null;
  const next = build(t.cron ?? '', t.timezone).nextRun(new Date(afterMs));
  return next ? next.getTime() : null;
}

/**
 * The fire to run now for a schedule due at `dueMs` (≤ now): the newest time ≤ now not before `dueMs`, so after an
 * outage the missed fires collapse into one, late.
 */
export function newestMissed(t: Timing, dueMs: number, nowMs: number): number {
  if (t.at !== null || t.cron === null) return dueMs;
  const prev = build(t.cron, t.timezone).previousRuns(1, new Date(nowMs + 1))[0];
  return prev && prev.getTime() > dueMs ? prev.getTime() : dueMs;
}
