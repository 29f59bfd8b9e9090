import fp from 'fastify-plugin';
import type { FastifyRequest, RouteOptions, preHandlerHookHandler } from 'fastify';
import { quotaExceeded } from '../errors.js';
import { TenantSlots } from './slots.js';

export interface QuotaOptions {
  /** Most sessions a tenant keeps (creates and forks beyond are refused). 0: no limit. */
  maxSessions: number;
  /** Most WebSockets a tenant holds open at once, on all replicas together. 0: no limit. */
  maxWebSockets: number;
}

/**
 * Per-tenant quotas of spec §6.4, across replicas (the counts live in Redis). Registered inside the `/v1` scope: its
 * `onRoute` hook adds the checks to the routes that create what is counted (chosen by their registered method and
 * pattern, never by a request's URL):
 * - `TENANT_MAX_SESSIONS`: POST /v1/sessions and POST /v1/sessions/:id/fork count the tenant's session index
 *   (ZCARD). Concurrent creates may each see room: the quota can be passed by the creates in flight at once.
 * - `TENANT_MAX_WEBSOCKETS`: a WebSocket route takes a slot (TenantSlots) after the route's own checks and before
 *   the upgrade, and gives it back when the socket closes.
 * Over a quota: 429 `quota_exceeded`, `details: {quota, limit}`.
 */
export default fp<QuotaOptions>(
  async (app, opts) => {
    const sessionsQuota: preHandlerHookHandler = async function (req) {
      const n = await app.store.countSessions(req.tenant);
      if (n >= opts.maxSessions) throw quotaExceeded('TENANT_MAX_SESSIONS', opts.maxSessions, 'sessions');
    };
    const sockets = new TenantSlots(app.redis, 'ws');
    app.addHook('onClose', async () => sockets.close());
    const webSocketQuota = async function (req: FastifyRequest) {
      if (!req.ws) return; // a plain GET of a WebSocket route is refused by @fastify/websocket itself
      const release = await sockets.acquire(req.tenant, opts.maxWebSockets);
      if (!release) throw quotaExceeded('TENANT_MAX_WEBSOCKETS', opts.maxWebSockets, 'open WebSockets');
      req.raw.socket.once('close', release);
    };

    const append = (route: RouteOptions, hook: preHandlerHookHandler) => {
      const own = route.preHandler;
      route.preHandler = own === undefined ? [hook] : Array.isArray(own) ? [...own, hook] : [own, hook];
    };
    app.addHook('onRoute', (route) => {
      const methods = Array.isArray(route.method) ? route.method : [route.method];
      const creates =
        methods.includes('POST') && (route.url === '/v1/sessions' || route.url === '/v1/sessions/:id/fork');
      if (creates && opts.maxSessions > 0) append(route, sessionsQuota);
      if ('websocket' in route && route.websocket === true && opts.maxWebSockets > 0)
        append(route, webSocketQuota);
    });
  },
  { name: 'quotas', dependencies: ['redis', 'engine', 'auth'] },
);
