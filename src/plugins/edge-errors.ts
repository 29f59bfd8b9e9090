import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { errorBody } from '../errors.js';
import { requestLine } from './access-log.js';

/**
 * What is answered before a route runs, in the one error envelope: a URL the router cannot decode (`%ff`), and
 * what Node's HTTP parser refuses (a malformed request: 400; headers over the limit: 431). And the request id:
 * a client's `x-request-id` is kept when well-formed, else one is made; every answer echoes it.
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
