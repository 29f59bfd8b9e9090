import fp from 'fastify-plugin';
import cors from '@fastify/cors';
import type { FastifyRequest } from 'fastify';
import { AppError } from '../errors.js';

export interface BrowserOriginOptions {
  /** `CORS_ORIGINS`: origins whose pages may use the API; undefined: no CORS headers, any WebSocket Origin. */
  origins: string[] | undefined;
}

/** Request headers a browser page sends to the API (the preflight lists them). */
const ALLOWED_HEADERS = [
  'authorization',
  'content-type',
  'if-match',
  'idempotency-key',
  'last-event-id',
  'x-request-id',
];
/** Response headers a page may read. */
const EXPOSED_HEADERS = ['etag', 'retry-after', 'location', 'x-request-id'];

/**
 * Whether the page that sent `origin` is served by this service itself (the console): the Origin's host is the
 * request's Host. Browsers never let a page choose either header, so a foreign page cannot pass this.
 */
function sameOrigin(req: FastifyRequest, origin: string): boolean {
  const host = req.headers.host;
  return host !== undefined && (origin === `http://${host}` || origin === `https://${host}`);
}

/**
 * Browsers (spec §6.5). Registered before the auth hook, so both of its hooks run first:
 * - `@fastify/cors` answers preflights (`OPTIONS`) in its own onRequest hook, without a key, and adds
 *   `Access-Control-Allow-Origin` only for listed origins (a browser then refuses the answer to any other page);
 * - a WebSocket upgrade whose `Origin` is neither listed nor this service's own origin gets 403
 *   `origin_not_allowed` before the upgrade. Requests without `Origin` (servers, not browsers) pass.
 */
export default fp<BrowserOriginOptions>(
  async (app, { origins }) => {
    if (!origins) return;
    const listed = new Set(origins);
    await app.register(cors, {
      origin: origins,
      methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
      allowedHeaders: ALLOWED_HEADERS,
      exposedHeaders: EXPOSED_HEADERS,
      // Seconds a browser may reuse a preflight's answer.
      maxAge: 600,
    });
    app.addHook('onRequest', async (req) => {
      if (req.headers.upgrade?.toLowerCase() !== 'websocket') return;
      const origin = req.headers.origin;
      if (origin === undefined || listed.has(origin) || sameOrigin(req, origin)) return;
      throw new AppError(
        403,
        'origin_not_allowed',
        'WebSocket connections from this origin are not allowed.',
      );
    });
  },
  { name: 'browser-origins' },
);
