import fp from 'fastify-plugin';
import cors from '@fastify/cors';
import type { FastifyRequest } from 'fastify';
import { DomainError, errorBody } from '../errors.js';

export interface BrowserOriginOptions {
  /** `CORS_ORIGINS`: origins whose pages may use the API; undefined: no CORS headers, any WebSocket Origin. */
  origins: string[] | undefined;
  /** Open mode (no API_KEYS): only loopback `Host` values are answered (421 `host_not_allowed`). */
  open: boolean;
}

/** `localhost`, `127.x.y.z` or `[::1]`, with any port: the names a page on this machine reaches the service by. */
const LOOPBACK_HOST = /^(localhost|127(\.\d{1,3}){3}|\[::1\])(:\d{1,5})?$/i;

function isLoopbackHost(host: string | undefined): boolean {
  return host !== undefined && LOOPBACK_HOST.test(host);
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
 * Whether the page that sent `origin` is the service's own console on this machine: the Origin's host is the
 * request's Host and that Host is a loopback name. A Host is whatever name the page was loaded by — a name of the
 * attacker's that rebinds to the service's address is "same origin" too — so beyond loopback only the configured
 * CORS_ORIGINS count (list the console's public origin there).
 */
function sameOrigin(req: FastifyRequest, origin: string): boolean {
  const host = req.headers.host;
  return isLoopbackHost(host) && (origin === `http://${host}` || origin === `https://${host}`);
}

/**
 * Browsers (spec §6.5). Registered before the auth hook, so both of its hooks run first:
 * - `@fastify/cors` answers preflights (`OPTIONS`) in its own onRequest hook, without a key, and adds
 *   `Access-Control-Allow-Origin` only for listed origins (a browser then refuses the answer to any other page);
 * - a WebSocket upgrade whose `Origin` is neither listed nor this service's own loopback origin gets 403
 *   `origin_not_allowed` before the upgrade. Requests without `Origin` (servers, not browsers) pass.
 */
export default fp<BrowserOriginOptions>(
  async (app, { origins, open }) => {
    // DNS rebinding: without keys, a page whose name resolves to 127.0.0.1 would be same-origin with the service.
    if (open)
      app.addHook('onRequest', async (req) => {
        if (!isLoopbackHost(req.headers.host))
          throw new DomainError(
            'host_not_allowed',
            'Without API_KEYS the service answers only to localhost, 127.x.y.z and [::1] as Host.',
          );
      });
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
    // @fastify/cors answers a preflight of any origin with the allowed methods and headers: an unlisted origin
    // gets none of them (only listed ones learn what the API allows).
    app.addHook('onSend', async (req, reply, payload) => {
      // @fastify/cors answers an OPTIONS that is no preflight (no Origin or no Access-Control-Request-Method) with
      // a bare-text 400: the same answer, in the envelope.
      if (req.method === 'OPTIONS' && reply.statusCode === 400 && payload === 'Invalid Preflight Request') {
        reply.type('application/json; charset=utf-8');
        // With its `request_id`, as every error answer (the envelope's hook saw the bare text, not this).
        return JSON.stringify(
          errorBody(
            'invalid_request',
            'An OPTIONS request is a CORS preflight: it needs Origin and Access-Control-Request-Method.',
            undefined,
            req.id,
          ),
        );
      }
      if (req.method !== 'OPTIONS' || (req.headers.origin !== undefined && listed.has(req.headers.origin)))
        return payload;
      for (const name of Object.keys(reply.getHeaders()))
        if (name.startsWith('access-control-')) reply.removeHeader(name);
      return payload;
    });
    app.addHook('onRequest', async (req) => {
      if (req.headers.upgrade?.toLowerCase() !== 'websocket') return;
      const origin = req.headers.origin;
      if (origin === undefined || listed.has(origin) || sameOrigin(req, origin)) return;
      throw new DomainError('origin_not_allowed', 'WebSocket connections from this origin are not allowed.');
    });
  },
  { name: 'browser-origins' },
);
