import type { FastifyBaseLogger, FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { badRequest, errorBody } from '../errors.js';
import { ERROR_STATUS } from './error-status.js';
import { requestLine } from './access-log.js';

/**
 * What is answered before a route runs, in the one error envelope: a URL the router cannot decode (`%ff`), what
 * Node's HTTP parser refuses (a malformed request: 400; headers over the limit: 431), and the two refusals Node's
 * HTTP server would make itself in bare text (an HTTP/1.1 request without `Host`: 400; an `Expect` it cannot meet:
 * 417). And the request id: a client's `x-request-id` is kept when well-formed, else one is made; every answer
 * echoes it.
 */

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Fastify's `genReqId`: the client's `x-request-id` when it is ≤ 128 chars of `[A-Za-z0-9._:-]`, else a new one. */
export function requestId(req: IncomingMessage): string {
  const given = req.headers['x-request-id'];
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : newRequestId();
}

const newRequestId = () => `req_${randomBytes(8).toString('hex')}`;

/** Fastify's `frameworkErrors`: errors met before routing (FST_ERR_BAD_URL, …) answered 400 `invalid_request`. */
export function frameworkErrors(err: FastifyError, req: FastifyRequest, reply: FastifyReply): void {
  reply.header('x-request-id', req.id);
  const message = err.code === 'FST_ERR_BAD_URL' ? 'The URL is not valid.' : 'The request is not valid.';
  // Answered before routing: no hook runs, so the access log's line and the body's id are written here.
  reply.code(400);
  requestLine(req, reply);
  void reply.send(errorBody('invalid_request', message, undefined, req.id));
}

/**
 * Fastify's `clientErrorHandler` (called with the Fastify instance as `this`): Node's parser refused the request;
 * answered in the envelope when possible, with a new request id that its one log line carries too.
 */
export function clientErrorHandler(this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket): void {
  // ECONNRESET, or the connection's end in the middle of a request (HPE_INVALID_EOF_STATE): the client went away;
  // there is no one to answer, and a request already handed to the app logs its own abort (src/plugins/errors.ts).
  if (!socket.writable || err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE') {
    socket.destroy();
    return;
  }
  const tooLarge = err.code === 'HPE_HEADER_OVERFLOW';
  const status = tooLarge ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  const reason = tooLarge
    ? 'Request Header Fields Too Large'
    : status === 408
      ? 'Request Timeout'
      : 'Bad Request';
  const code = tooLarge ? 'headers_too_large' : status === 408 ? 'request_aborted' : 'invalid_request';
  const id = newRequestId();
  const body = JSON.stringify(
    errorBody(
      code,
      tooLarge
        ? 'The request headers are too large.'
        : status === 408
          ? 'The request took too long.'
          : 'The request is malformed.',
      undefined,
      id,
    ),
  );
  this.log.info({ request_id: id, route: '(no route)', status, code }, 'request refused by the HTTP parser');
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\nX-Request-Id: ${id}\r\n\r\n${body}`,
  );
}

/**
 * The HTTP server's `checkExpectation` listener (src/boot.ts). Node hands it an HTTP/1.1 request whose `Expect` is
 * not `100-continue` (the one expectation Node meets: it writes `100 Continue` and the app gets the request), which
 * it would otherwise answer with a bare 417 itself. Answered here, before any route or hook: what the client asked
 * the service to promise is not something it promises (RFC 9110 §10.1.1), whatever the route, key or body. The
 * connection is closed: the body the client may be sending is not read, nor left to be drained by the next request.
 * Upgrades never come here (Node gives them to its `upgrade` listener before it looks at `Expect`).
 */
export const checkExpectation =
  (log: FastifyBaseLogger) =>
  (req: IncomingMessage, res: ServerResponse): void => {
    const id = requestId(req);
    const status = ERROR_STATUS.expectation_failed;
    const body = JSON.stringify(
      errorBody(
        'expectation_failed',
        'The Expect header asks for an expectation the service does not meet: only `100-continue` is.',
        undefined,
        id,
      ),
    );
    log.info(
      { request_id: id, route: '(no route)', method: req.method, status, code: 'expectation_failed' },
      'request refused by the HTTP server',
    );
    res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      connection: 'close',
      'x-request-id': id,
    });
    res.end(body);
  };

/**
 * HTTP/1.1 requires `Host` (RFC 9112 §3.2: a server MUST answer 400 to a request without one). Node's server makes
 * that check itself with a bare 400 unless built with `requireHostHeader: false` (src/boot.ts), so the app makes it:
 * the first `onRequest` check of every route, WebSocket upgrades included (which Node never checked), before the
 * open mode's loopback `Host` check (421, src/plugins/cors.ts), whose refusal would otherwise answer it. HTTP/1.0
 * has no `Host` requirement and passes as before. Registered after @fastify/websocket, whose `onRequest` hook must
 * see an upgrade first for a refused upgrade's socket to be closed.
 */
export const hostRequired = fp(
  async (app) => {
    app.addHook('onRequest', async (req) => {
      if (req.raw.httpVersion === '1.1' && req.headers.host === undefined)
        throw badRequest('An HTTP/1.1 request must carry a Host header.', [
          { path: '/host', code: 'custom', message: 'required in HTTP/1.1' },
        ]);
    });
  },
  { name: 'host-required' },
);
