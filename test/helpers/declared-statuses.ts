import { channel } from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import { after } from 'node:test';
import type { FastifyInstance } from 'fastify';

const OPENAPI_JSON = new URL('../../openapi.json', import.meta.url);

/**
 * Every status the tests cause is a status the OpenAPI document declares for the route that answered it (issue 28:
 * a generated client compares `status === 409` only if the document names 409). Each harness records its service's
 * answers as (method, route pattern, status); a spawned service's are read from its access-log lines
 * (src/plugins/access-log.ts). Nothing of this is in the service: the in-process harness adds an `onResponse` hook
 * to the Fastify instance from here, before its routes are registered (see `recording`).
 *
 * The check runs once, after every test of the file (a root `after` hook: the file fails, naming each undeclared
 * answer and the service that gave it), not in `close()`: a throw there would skip the rest of a test's cleanup
 * (its Redis, its other services) and leave the file hanging on their handles instead of failing.
 */

export interface Answer {
  method: string;
  /** The route's pattern in the document's spelling: `/v1/sessions/{id}`. */
  path: string;
  status: number;
  /**
   * The route says `hide: true`: it is in the document only if src/openapi/document.ts describes it (the
   * WebSocket route, /docs), and not checked when it is not (a test's own route, @fastify/swagger-ui's files).
   */
  hidden: boolean;
}

type Responses = Record<string, Record<string, { responses?: Record<string, unknown> }>>;

/** A Fastify route pattern (`/v1/sessions/:id`, `/v1/memory/*`) as the document spells it (src/openapi/document.ts). */
export const documentPath = (url: string) =>
  url.replace(/:([A-Za-z0-9_]+)/g, '{$1}').replace(/\/\*$/, '/{path}');

/** The answers of one service, each (method, route, status) once, with how often it was seen. */
export class AnswerLog {
  private readonly seen = new Map<string, Answer & { count: number }>();

  /** `who`: the service, in the file's failure message. */
  constructor(readonly who = 'a service') {
    logs.add(this);
  }

  /** `route` as Fastify names it; a request that matched no route (`undefined`) is no operation's answer. */
  add(method: string, route: string | undefined, status: number, hidden = false): void {
    // A CORS preflight is answered by @fastify/cors for any path, no operation of the document.
    if (!route || method === 'OPTIONS') return;
    // Fastify answers HEAD with its GET route (exposeHeadRoutes); the document lists the GET.
    const m = method === 'HEAD' ? 'GET' : method;
    const path = documentPath(route);
    const key = `${m} ${path} ${status}`;
    const a = this.seen.get(key);
    if (a) a.count++;
    else this.seen.set(key, { method: m, path, status, hidden, count: 1 });
  }

  answers(): Answer[] {
    return [...this.seen.values()];
  }

  /** The answers `doc` does not declare for their route, as `METHOD /path → status` lines. */
  undeclared(doc: { paths: Responses } = committedDocument()): string[] {
    return this.answers()
      .filter((a) => {
        const op = doc.paths[a.path]?.[a.method.toLowerCase()];
        if (!op && a.hidden) return false;
        return !op?.responses?.[String(a.status)];
      })
      .map((a) => {
        const op = doc.paths[a.path]?.[a.method.toLowerCase()];
        const has = op ? Object.keys(op.responses ?? {}).join(', ') : 'no such operation';
        return `${a.method} ${a.path} → ${a.status} (declares ${has})`;
      })
      .sort();
  }

  /** Records every answer `fastify` gives. Before its `ready()`: Fastify takes no hook after. */
  attach(fastify: FastifyInstance): void {
    fastify.addHook('onResponse', async (req, reply) => {
      const hidden = (req.routeOptions.schema as { hide?: unknown } | undefined)?.hide === true;
      this.add(req.method, req.routeOptions.url, reply.statusCode, hidden);
    });
  }

  /** An access-log line of a service process (`{msg: 'request', route, method, status}`), if it is one. */
  addLogLine(line: Record<string, unknown>): void {
    if (line['msg'] !== 'request' || typeof line['status'] !== 'number') return;
    const route =
      typeof line['route'] === 'string' && line['route'] !== '(no route)' ? line['route'] : undefined;
    // A log line does not say whether its route is hidden (the `/v1/*` catch-all's 401 and 404 are no operation):
    // checked only when the document has the route. test/openapi/openapi.test.ts checks every shown route is there.
    this.add(String(line['method']), route, line['status'], true);
  }
}

/**
 * Calls `build` with every Fastify instance created during its synchronous part recorded into `log`: Fastify
 * publishes each new instance on the `fastify.initialization` diagnostics channel as `Fastify()` returns, before
 * any plugin or route is registered. `startService` creates its instance before its first `await`, and nothing else
 * runs in between, so exactly that instance is recorded.
 */
export function recording<T>(log: AnswerLog, build: () => T): T {
  const ch = channel('fastify.initialization');
  const onInit = (msg: unknown) => log.attach((msg as { fastify: FastifyInstance }).fastify);
  ch.subscribe(onInit);
  try {
    return build();
  } finally {
    ch.unsubscribe(onInit);
  }
}

/** Every log of this process's services; checked after the file's last test. */
const logs = new Set<AnswerLog>();

after(() => {
  const missing = [...logs].flatMap((log) => log.undeclared().map((line) => `${log.who}: ${line}`));
  if (missing.length === 0) return;
  throw new Error(
    `${process.argv[1] ?? 'the tests'} caused answers whose status openapi.json does not declare for their ` +
      `route (add each to the route's errors(...) ` +
      `list, then \`npm run openapi\`):\n  ${[...new Set(missing)].join('\n  ')}`,
  );
});

let committed: { paths: Responses } | undefined;
/**
 * openapi.json as committed: the served document (test/openapi/openapi.test.ts fails when it is stale), read once per
 * process instead of building it from every harness's routes (~0.3 s of CPU each: src/openapi/served.ts).
 */
export function committedDocument(): { paths: Responses } {
  committed ??= JSON.parse(readFileSync(OPENAPI_JSON, 'utf8')) as { paths: Responses };
  return committed;
}
