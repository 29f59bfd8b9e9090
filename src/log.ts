/**
 * How the service logs. pino, `(obj, msg)`; each component logs through its own child logger carrying
 * `component` (see `Component`), and a thing has one field name wherever it is logged, so one query finds every line
 * about it: `session`, `tenant`, `iteration`, `tool`, `tool_use_id`, `webhook`, and `err` (serialised by pino with its
 * stack and `cause`). `test/ops/log-fields.test.ts` checks the source for other spellings.
 */
import type { FastifyBaseLogger } from 'fastify';
import pino from 'pino';

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
  | 'tool-tasks';

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
