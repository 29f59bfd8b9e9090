import fp from 'fastify-plugin';
import { wantsEventStream } from '../events/sink.js';
import type { FastifyRequest, RouteOptions, preHandlerHookHandler } from 'fastify';
import { QuotaExceeded, quotaExceeded } from '../errors.js';
import { TenantSlots } from './slots.js';
import { keyedCreateId } from '../sessions/create.js';
import { keyedForkId } from '../sessions/fork.js';

type Closer = (event: 'close', listener: () => void) => unknown;

export interface QuotaOptions {
  /** Most sessions a tenant keeps (creates and forks beyond are refused). 0: no limit. */
  maxSessions: number;
  /**
   * Most event streams (WebSockets, SSE, chat streams) a tenant holds open at once, on all replicas together (0: no
   * limit), and the name its refusals give (src/config.ts `streamsQuota`).
   */
  streams: { name: string; limit: number };
  /** Most of them one client token holds open at once (besides the tenant's count), on all replicas. 0: no limit. */
  tokenMaxStreams: number;
}

/**
 * Per-tenant quotas of spec §6.4, across replicas (the counts live in Redis). Registered inside the `/v1` scope: its
 * `onRoute` hook adds the checks to the routes that create what is counted (chosen by their registered method and
 * pattern, never by a request's URL):
 * - `TENANT_MAX_SESSIONS`: POST /v1/sessions and POST /v1/sessions/:id/fork count the tenant's session index
 *   (ZCARD). Concurrent creates may each see room: the quota can be passed by the creates in flight at once.
 * - `TENANT_MAX_STREAMS`: a WebSocket route takes a slot (TenantSlots) after the route's own checks and before
 *   the upgrade, and gives it back when the socket closes; an SSE request of GET /v1/sessions/:id/events, and
 *   every request of the chat routes' UI message streams (POST /v1/chat, GET /v1/chat/:id/stream), takes one from
 *   the same count and gives it back when its response closes.
 * - `CLIENT_TOKEN_MAX_STREAMS`: a stream opened with a client token (a browser's: untrusted) also takes a slot of
 *   the token's own count, first, so one page cannot fill its tenant's TENANT_MAX_STREAMS and lock out the tenant's
 *   backend; a stream the token is refused takes none of the tenant's.
 * Over a quota: 429 `quota_exceeded`, `details: {quota, limit}`.
 */
export default fp<QuotaOptions>(
  async (app, opts) => {
    const sessionsQuota: preHandlerHookHandler = async function (req) {
      const n = await app.store.index.count(req.tenant);
      if (n < opts.maxSessions) return;
      // A keyed retry whose first request made its session (and died before its answer's record) is counted in
      // `n`: it is let through to answer that session, not refused for it.
      const token = req.idempotency?.token;
      if (token !== undefined) {
        const id = req.routeOptions.url === '/v1/sessions' ? keyedCreateId(token) : keyedForkId(token);
        if ((await app.store.load(id))?.tenant === req.tenant) return;
      }
      throw quotaExceeded('TENANT_MAX_SESSIONS', opts.maxSessions, 'sessions');
    };
    const streams = opts.streams.limit > 0 || opts.tokenMaxStreams > 0;
    // The slots keep their key name ('ws') from before SSE was counted: replicas of both versions share the count.
    // No stream quota, no slots: nor their liveness writes and renewals.
    const sockets = streams ? new TenantSlots(app.redis, 'ws') : undefined;
    if (sockets) app.addHook('onClose', async () => sockets.close());
    /**
     * Takes a slot for as long as `conn` (the request's socket or response) stays open. Its `close` is listened for
     * before the slot is asked for: a client that goes away while Redis answers has closed already when the slot
     * arrives (no `close` left to wait for), and the slot is given back at once — else it would be held, and
     * renewed, for the life of the process.
     */
    const hold = async (req: FastifyRequest, conn: { once: Closer; off: Closer; destroyed: boolean }) => {
      if (!sockets) return;
      let closed = false;
      const onClose = () => void (closed = true);
      conn.once('close', onClose);
      const held: Array<() => void> = [];
      const release = () => held.forEach((r) => r());
      try {
        const token = req.clientToken;
        if (token && opts.tokenMaxStreams > 0) {
          const own = await sockets.acquire(req.tenant, opts.tokenMaxStreams, `ct:${token.id}`);
          if (!own) throw sockets.refusal(tokenStreamsExceeded(opts.tokenMaxStreams));
          held.push(own);
        }
        const { name, limit } = opts.streams;
        if (limit > 0) {
          const tenant = await sockets.acquire(req.tenant, limit);
          if (!tenant) throw sockets.refusal(quotaExceeded(name, limit, 'open event streams'));
          held.push(tenant);
        }
      } catch (err) {
        release(); // the token's slot, when the tenant's was refused (or Redis failed)
        throw err;
      } finally {
        conn.off('close', onClose);
      }
      if (closed || conn.destroyed) release();
      else conn.once('close', release);
    };
    const webSocketQuota = async function (req: FastifyRequest) {
      if (!req.ws) return; // a plain GET of a WebSocket route is refused by @fastify/websocket itself
      await hold(req, req.raw.socket);
    };
    const sseQuota: preHandlerHookHandler = async function (req, reply) {
      if (!wantsEventStream(req.headers.accept)) return;
      await hold(req, reply.raw);
    };

    const chatQuota: preHandlerHookHandler = async function (req, reply) {
      await hold(req, reply.raw);
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
      if ('websocket' in route && route.websocket === true && streams) append(route, webSocketQuota);
      if (methods.includes('GET') && route.url === '/v1/sessions/:id/events' && streams)
        append(route, sseQuota);
      // The chat routes answer a UI message stream (SSE) whatever the request's Accept says.
      const chat =
        (methods.includes('POST') && route.url === '/v1/chat') ||
        (methods.includes('GET') && route.url === '/v1/chat/:id/stream');
      if (chat && streams) append(route, chatQuota);
    });
  },
  { name: 'quotas', dependencies: ['redis', 'engine', 'auth'] },
);

const tokenStreamsExceeded = (limit: number) =>
  new QuotaExceeded(
    'quota_exceeded',
    `This client token already holds ${limit} open event streams, the most CLIENT_TOKEN_MAX_STREAMS allows.`,
    { quota: 'CLIENT_TOKEN_MAX_STREAMS', limit },
  );
