import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { ID_LIKE } from '../schemas.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The session a request made (create, fork): its request line names it (`session`). */
    createdSession: string | null;
  }
}

/** Probes and scrapes: one line each at debug, so a load balancer's health checks do not drown the log. */
const QUIET_ROUTES = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * The session a request is about, for its line: the one it made, else the `:id` of a session's route, else the
 * chat body's `id`. So "what did request Y do" leads to a session id, and "who touched session X" to request ids.
 */
function sessionOf(req: FastifyRequest, route: string): string | null {
  if (req.createdSession) return req.createdSession;
  if (route.startsWith('/v1/sessions/:id') || route.startsWith('/v1/chat/:id'))
    return idLike((req.params as { id?: unknown } | undefined)?.id);
  if (route === '/v1/chat') return idLike((req.body as { id?: unknown } | undefined)?.id);
  return null;
}

/** An id as the client gave it, only when it has an id's form: a refused request's 16 KiB of text is not logged. */
const idLike = (id: unknown): string | null => (typeof id === 'string' && ID_LIKE.test(id) ? id : null);

/**
 * One `request` line per answered request, at info: the route pattern (never the raw URL: no query strings of a
 * tenant's in the log's cardinality, nothing a client spelled), method, status, `ms` (from the request's arrival to
 * the end of the answer), tenant and the session it was about (`sessionOf`). The request logger adds `request_id`
 * (the `x-request-id` of the answer). No bodies, no headers, no keys. A WebSocket logs its upgrade's answer only
 * when it is refused (an open socket never reaches onResponse); routes/stream.ts logs its close.
 */
const accessLog: FastifyPluginAsync = async (app) => {
  app.decorateRequest('createdSession', null);
  app.addHook('onResponse', async (req, reply) => requestLine(req, reply));
};

/**
 * The request's line. Called by onResponse, and by the routes that hijack their answer (SSE streams: Fastify runs no
 * onResponse for them) when it ends, so a stream's line says how long it was open.
 */
export function requestLine(req: FastifyRequest, reply: FastifyReply): void {
  const route = req.routeOptions.url ?? '(no route)';
  const line = {
    route,
    method: req.method,
    status: reply.statusCode,
    ms: Math.round(reply.elapsedTime),
    tenant: req.tenant || null,
    session: sessionOf(req, route),
  };
  if (QUIET_ROUTES.has(route)) req.log.debug(line, 'request');
  else req.log.info(line, 'request');
}

export default fp(accessLog, { name: 'access-log' });
