import fp from 'fastify-plugin';
import type { FastifyRequest } from 'fastify';
import { DomainError, InvalidRequest } from '../errors.js';
import { HttpRefusal } from './error-status.js';

/**
 * The WebSocket handshake checked before anything else of an upgrade (issue 22): a malformed one is answered 400
 * `invalid_request` in the error envelope, where `ws` would write its own bare `400 Bad Request` text (or, for an
 * upgrade on a route that is not a WebSocket, @fastify/websocket would complete the handshake and close the socket
 * at once). Registered after @fastify/websocket, whose `onRequest` hook sets `req.ws` for requests that came by
 * the server's `upgrade` event.
 *
 * - Only the routes declared `websocket: true` upgrade: another route answers 400 (once its key is checked). An
 *   unknown path answers its 404 `route_not_found` (under /v1, from the catch-all's `onRequest` hook, once the key is
 *   checked: before this one runs).
 * - `Sec-WebSocket-Key`: one value, base64 of 16 bytes (RFC 6455 §4.1); `Sec-WebSocket-Version`: 13 (or 8, which
 *   `ws` also speaks), else 400 with `Sec-WebSocket-Version: 13` (§4.4).
 * - `Sec-WebSocket-Protocol`: comma-separated tokens, none twice, at most MAX_PROTOCOLS of them, as `ws` requires
 *   (a list it cannot parse made it answer its bare 400).
 */
const KEY = /^[+/0-9A-Za-z]{22}==$/;
/** An HTTP token (RFC 9110 §5.6.2), what a subprotocol must be. */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Most subprotocols one upgrade may offer: the service selects `bearer` or none, so a few are plenty. */
const MAX_PROTOCOLS = 16;

function refusal(req: FastifyRequest, wsRoutes: ReadonlySet<string>): DomainError | null {
  if (!wsRoutes.has(req.routeOptions.url ?? ''))
    return new InvalidRequest('invalid_request', 'This route does not upgrade to a WebSocket.');
  if (req.method !== 'GET') return new InvalidRequest('invalid_request', 'A WebSocket upgrade is a GET.');
  if (req.headers.upgrade?.toLowerCase() !== 'websocket')
    return new InvalidRequest('invalid_request', 'The Upgrade header must be "websocket".');
  const key = req.headers['sec-websocket-key'];
  if (typeof key !== 'string' || !KEY.test(key.trim()))
    return new InvalidRequest(
      'invalid_request',
      'Sec-WebSocket-Key must be one value: the base64 of 16 random bytes.',
    );
  const version = req.headers['sec-websocket-version'];
  if (version !== '13' && version !== '8')
    return new HttpRefusal(
      'invalid_request',
      'Sec-WebSocket-Version must be 13.',
      { supported: [13] },
      { 'sec-websocket-version': '13' },
    );
  const offered = req.headers['sec-websocket-protocol'];
  if (offered !== undefined) {
    const list = offered.split(',').map((p) => p.trim());
    if (
      list.length > MAX_PROTOCOLS ||
      !list.every((p) => TOKEN.test(p)) ||
      new Set(list).size !== list.length
    )
      return new InvalidRequest(
        'invalid_request',
        `Sec-WebSocket-Protocol must list at most ${MAX_PROTOCOLS} distinct tokens, separated by commas.`,
        { max_protocols: MAX_PROTOCOLS },
      );
  }
  return null;
}

export default fp(
  async (app) => {
    const wsRoutes = new Set<string>();
    app.addHook('onRoute', (route) => {
      if (route.websocket === true) wsRoutes.add(route.url);
    });
    // preValidation: after every `onRequest` hook, so the /v1 scope's key check comes first (an upgrade without a
    // key answers 401 on every /v1 path, as any request: no route discovery), and before the routes' preHandlers
    // (the stream quota's slot is never taken for a refused handshake). Unknown paths keep their 404
    // `route_not_found` (the /v1 catch-all's is thrown in its `onRequest` hook, so never reaches this).
    app.addHook('preValidation', async (req) => {
      if (!req.ws || req.is404) return;
      const refused = refusal(req, wsRoutes);
      if (refused) throw refused;
    });
  },
  { name: 'ws-handshake', dependencies: ['@fastify/websocket'] },
);
