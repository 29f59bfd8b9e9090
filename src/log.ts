/**
 * How the service logs. pino, `(obj, msg)`; each component logs through its own child logger carrying
 * `component` (see `Component`), and a thing has one field name wherever it is logged, so one query finds every line
 * about it: `session`, `tenant`, `iteration`, `tool`, `tool_use_id`, `webhook`, and `err` (serialised by pino with its
 * stack and `cause`). `test/ops/log-fields.test.ts` checks the source for other spellings.
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

export function componentLog(log: FastifyBaseLogger, component: Component): FastifyBaseLogger {
  return log.child({ component });
}
