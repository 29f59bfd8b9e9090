/**
 * How the service logs. pino, `(obj, msg)`; each component logs through its own child logger carrying
 * `component` (see `Component`), and a thing has one field name wherever it is logged (see `LOG_FIELDS`), so one query
 * finds every line about it. `test/log-fields.test.ts` checks the source for other spellings.
 */
import type { FastifyBaseLogger } from 'fastify';

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

/**
 * The field names of the things a log line is about: a session id, a tenant, an iteration number, a tool name, a
 * tool_use id, a webhook id, and the error (`err`, serialised by pino with its stack and `cause`).
 */
export const LOG_FIELDS = [
  'session',
  'tenant',
  'iteration',
  'tool',
  'tool_use_id',
  'webhook',
  'err',
] as const;

export function componentLog(log: FastifyBaseLogger, component: Component): FastifyBaseLogger {
  return log.child({ component });
}
