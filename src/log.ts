/**
 * How the service logs. pino, `(obj, msg)`; each component logs through its own child logger carrying
 * `component` (see `Component`), and a thing has one field name wherever it is logged, so one query finds every line
 * about it: `session`, `tenant`, `iteration`, `tool`, `tool_use_id`, `webhook`, and `err` (serialised by pino with its
 * stack and `cause`). `test/ops/log-fields.test.ts` checks the source for other spellings.
 */
import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';
import { format } from 'node:util';

/** The components that log, each through `componentLog(log, name)`. */
export type Component =
  | 'boot'
  | 'engine'
  | 'events'
  | 'redis'
  | 'webhooks'
  | 'stream'
  | 'quotas'
  | 'mcp'
  | 'upstream'
  | 'schedules'
  | 'agents'
  | 'tool-tasks'
  | 'console';

export function componentLog(log: FastifyBaseLogger, component: Component): FastifyBaseLogger {
  return log.child({ component });
}

/** pino's stringifier of one value of a log line: its JSON text (pino's `stringify` with its circular fallback). */
type Stringifier = (value: unknown, stringifySafe?: unknown) => string;

/**
 * Makes pino's redaction skip the values that cannot hold a redacted path. With a `*.x` path in `redact` (boot.ts:
 * `*.apiKey`, `*.token`, …), pino hands every value of every line — strings and numbers included — to its wildcard
 * redactor, which parses each of the paths again per value (about 30 kB of garbage and 12 µs per line: the access
 * log's line alone has six values). A string, number or boolean has no property to redact, and for them that
 * redactor returns exactly `JSON.stringify(value)` (pino has already turned a non-finite number into null), so they
 * get that directly; objects (and null, errors, arrays) still go through the redactor as before. The output of a line
 * is the same byte for byte. Call it on the root logger (`app.log`): its children share the root's stringifiers
 * unless they set `redact` themselves, which no logger of this service does.
 */
export function skipRedactionOfPrimitives(log: FastifyBaseLogger): void {
  const stringifiers = (
    log as unknown as Record<symbol, Record<symbol, Stringifier | undefined> | undefined>
  )[pino.symbols.stringifiersSym];
  const wildcard = stringifiers?.[pino.symbols.wildcardFirstSym];
  if (!stringifiers || !wildcard) return;
  stringifiers[pino.symbols.wildcardFirstSym] = (value, stringifySafe) => {
    const t = typeof value;
    return t === 'string' || t === 'number' || t === 'boolean'
      ? JSON.stringify(value)
      : wildcard(value, stringifySafe);
  };
}

/** While a loop keeps failing, a reminder at most this often (ms). */
const STILL_FAILING_EVERY_MS = 60_000;

/**
 * The failures of a loop that runs every few hundred milliseconds (a sweep, a poll), logged once per outage: the
 * first at warn with its error, then one `still failing` line a minute with the count, and one `works again` line at
 * info when a pass succeeds. A Redis outage of an hour is a few lines per loop, not one per pass with a stack.
 */
export class FailureLog {
  private failures = 0;
  private since = 0;
  private lastLine = 0;

  constructor(
    private readonly log: FastifyBaseLogger,
    /** What fails, as the lines name it: `"<what> failed"`, `"<what> still failing"`, `"<what> works again"`. */
    private readonly what: string,
  ) {}

  failed(err: unknown): void {
    const now = Date.now();
    if (this.failures++ === 0) {
      this.since = this.lastLine = now;
      this.log.warn({ err }, `${this.what} failed`);
    } else if (now - this.lastLine >= STILL_FAILING_EVERY_MS) {
      this.lastLine = now;
      this.log.warn({ err, failures: this.failures, ms: now - this.since }, `${this.what} still failing`);
    }
  }

  ok(): void {
    if (this.failures === 0) return;
    this.log.info({ failures: this.failures, ms: Date.now() - this.since }, `${this.what} works again`);
    this.failures = 0;
  }
}

/** Distinct console messages logged at most once each, up to this many (then none: the set stays bounded). */
const CONSOLE_SEEN_MAX = 256;

/**
 * Sends `console.warn` and `console.error` of libraries (the SDK warns there of a deprecated model, on every request)
 * into the log as JSON lines (`component: console`), each distinct text once, so the process writes nothing but
 * JSON lines and a warning repeated per request is one line.
 */
export function routeConsoleToLog(log: FastifyBaseLogger): void {
  const out = componentLog(log, 'console');
  const seen = new Set<string>();
  const route =
    (level: 'warn' | 'error') =>
    (...args: unknown[]): void => {
      const text = format(...args);
      if (seen.has(text) || seen.size >= CONSOLE_SEEN_MAX) return;
      seen.add(text);
      out[level](text);
    };
  console.warn = route('warn');
  console.error = route('error');
}
