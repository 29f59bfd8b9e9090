import type { FastifyError, preParsingHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import {
  DomainError,
  FencedOut,
  QuotaExceeded,
  STORE_UNAVAILABLE_MESSAGE,
  StoreUnavailable,
  errorBody,
  type ErrorBody,
} from '../errors.js';
import { ERROR_STATUS, HttpRefusal } from './error-status.js';
import { readsSession } from './auth.js';
import { withoutAction } from '../sessions/view.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * How a route whose `bodyLimit` is not BODY_LIMIT names it (`max(BODY_LIMIT, 2×TOOL_RESULT_MAX_BYTES)`): its 413
     * `payload_too_large` says it, with its bytes, where another route's says BODY_LIMIT.
     */
    bodyLimitName?: string;
  }
}

function isErrorEnvelope(payload: unknown): payload is ErrorBody {
  if (typeof payload !== 'object' || payload === null || !('error' in payload)) return false;
  const error = (payload as { error: unknown }).error;
  return typeof error === 'object' && error !== null && 'code' in error;
}

const failIfAborted: preParsingHookHandler = (req, _reply, payload, done) => {
  if (req.raw.destroyed && !req.raw.complete)
    return done(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
  done(null, payload);
};

/**
 * One error handler: stable `{error: {code, message, details?}}`, 5xx internals only in the log. The only place a
 * domain error (src/errors.ts) becomes an answer: its status is its code's (ERROR_STATUS), its body the envelope.
 */
export default fp(
  async (app) => {
    app.addHook('onRequest', async (req, reply) => {
      reply.header('x-request-id', req.id);
    });
    // Every error answer names its request id in the body too, so whoever quotes the error quotes the id of the
    // request's log lines. Only objects reach this hook: an answer already serialized carries it itself.
    app.addHook('preSerialization', async (req, reply, payload: unknown) =>
      reply.statusCode >= 400 && isErrorEnvelope(payload)
        ? { ...payload, error: { ...payload.error, request_id: req.id } }
        : payload,
    );
    // A client that goes away while an async hook runs (the key check, the ingest-byte budget) leaves a request whose
    // body stream was destroyed before Fastify's body reader listens to it: the reader would wait for a body for
    // ever, and the request would be neither answered nor logged. So every route's last preParsing hook (route hooks
    // run after the app's, and nothing async runs between it and the reader) fails such a request as aborted.
    app.addHook('onRoute', (route) => {
      const own = route.preParsing;
      route.preParsing = [...(own === undefined ? [] : Array.isArray(own) ? own : [own]), failIfAborted];
    });
    app.setErrorHandler((err: FastifyError, req, reply) => {
      if (hasZodFastifySchemaValidationErrors(err)) {
        return reply.code(400).send({
          error: {
            code: 'invalid_request',
            message: `Invalid request ${err.validationContext ?? 'body'}.`,
            details: err.validation.map((v) => ({
              path: v.instancePath,
              code: v.keyword,
              message: v.message,
            })),
          },
        });
      }
      // A lost lease inside a request is a bug of ours, answered as any other (below); the store's outage is a 503.
      if (err instanceof DomainError && !(err instanceof FencedOut) && !(err instanceof StoreUnavailable)) {
        if (err instanceof HttpRefusal && err.headers) reply.headers(err.headers);
        if (err instanceof QuotaExceeded && err.retryAfterS !== undefined)
          reply.header('retry-after', String(err.retryAfterS));
        const status = err instanceof HttpRefusal && err.status ? err.status : ERROR_STATUS[err.code];
        return reply.code(status).send({
          error: {
            code: err.code,
            message: err.message,
            ...(err.details !== undefined
              ? { details: readsSession(req.clientToken) ? err.details : withoutAction(err.details) }
              : {}),
          },
        });
      }
      if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
        // The limit the route's parser applied, named: BODY_LIMIT, or the route's own (`bodyLimitName`).
        const { bodyLimit, config } = req.routeOptions;
        const limit =
          config.bodyLimitName === undefined
            ? `BODY_LIMIT (${bodyLimit} bytes)`
            : `the route's limit, ${config.bodyLimitName} = ${bodyLimit} bytes`;
        return reply
          .code(413)
          .send(errorBody('payload_too_large', `The request body is larger than ${limit}.`));
      }
      if (err.code === 'FST_ERR_CTP_INVALID_MEDIA_TYPE') {
        return reply.code(415).send(errorBody('unsupported_media_type', 'Send JSON (application/json).'));
      }
      if (
        err.code === 'FST_ERR_CTP_EMPTY_JSON_BODY' ||
        err.code === 'FST_ERR_CTP_INVALID_JSON_BODY' ||
        (err.statusCode === 400 && err.code?.startsWith?.('FST_'))
      ) {
        return reply.code(400).send(errorBody('invalid_json', 'The request body is not valid JSON.'));
      }
      if (req.raw.readableAborted || (err.code === 'ECONNRESET' && err.message === 'aborted')) {
        // The client went away mid-upload (or was timed out by REQUEST_TIMEOUT_MS): nothing to answer, not our error.
        req.log.info({ err: { code: err.code, message: err.message } }, 'client aborted the request');
        return reply.code(400).send(errorBody('request_aborted', 'The request was aborted.'));
      }
      // The clients give every command's failure that means Redis is down as StoreUnavailable (src/store/unavailable.ts).
      if (err instanceof StoreUnavailable) {
        req.log.warn({ err }, 'store unavailable');
        return reply
          .code(503)
          .header('retry-after', '2')
          .send(errorBody('store_unavailable', STORE_UNAVAILABLE_MESSAGE));
      }
      if (err.statusCode === 429) {
        return reply.code(429).send(errorBody('rate_limited', 'Too many requests.'));
      }
      // A plugin's client error (@fastify/static's 403 for `/docs/static/../..`, its 404…): never a 500. A path
      // refused or not found is answered as not found; any other 4xx keeps its status.
      if (typeof err.statusCode === 'number' && err.statusCode >= 400 && err.statusCode < 500) {
        if (err.statusCode === 403 || err.statusCode === 404)
          return reply
            .code(404)
            .send(errorBody('route_not_found', `No route ${req.method} ${req.url.split('?')[0]}.`));
        return reply.code(err.statusCode).send(errorBody('invalid_request', 'The request is not valid.'));
      }
      req.log.error({ err }, 'unhandled error');
      return reply.code(500).send(errorBody('internal_error', 'Something went wrong on our side.'));
    });
    app.setNotFoundHandler((req, reply) => {
      reply.code(404).send(errorBody('route_not_found', `No route ${req.method} ${req.url.split('?')[0]}.`));
    });
  },
  { name: 'errors' },
);
