import type { FastifyPluginAsync } from 'fastify';
import fp from 'fastify-plugin';

/** Probes and scrapes: one line each at debug, so a load balancer's health checks do not drown the log. */
const QUIET_ROUTES = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * One `request` line per answered request, at info: the route pattern (never the raw URL: no ids or query strings
 * of a tenant's in the log's cardinality, nothing a client spelled), method, status, `ms` (from the request's
 * arrival to the end of the answer) and tenant. The request logger adds `reqId` (the `x-request-id` of the answer).
 * No bodies, no headers, no keys. A WebSocket logs its upgrade's answer only when it is refused (an open socket
 * never reaches onResponse): its life is logged by the stream.
 */
const accessLog: FastifyPluginAsync = async (app) => {
  app.addHook('onResponse', async (req, reply) => {
    const route = req.routeOptions.url ?? '(no route)';
    const line = {
      route,
      method: req.method,
      status: reply.statusCode,
      ms: Math.round(reply.elapsedTime),
      tenant: req.tenant || null,
    };
    if (QUIET_ROUTES.has(route)) req.log.debug(line, 'request');
    else req.log.info(line, 'request');
  });
};

export default fp(accessLog, { name: 'access-log' });
