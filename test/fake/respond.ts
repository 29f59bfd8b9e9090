/** Writing the fake's HTTP answers: JSON bodies with a `request-id`, and errors in the API's envelope. */
import type http from 'node:http';
import { errorBody, shortId } from '../../src/offline/envelope.js';
import type { ApiErrorSpec } from '../../src/offline/wire.js';

/** The message the real API sends for each error type when a script gives none. */
export const DEFAULT_ERROR_MESSAGES: Record<string, string> = {
  invalid_request_error: 'Invalid request',
  authentication_error: 'invalid x-api-key',
  permission_error: 'Your API key does not have permission to use the specified resource.',
  not_found_error: 'Not found',
  request_too_large: 'Request exceeds the maximum allowed number of bytes.',
  rate_limit_error: 'Number of request tokens has exceeded your per-minute rate limit',
  api_error: 'Internal server error',
  overloaded_error: 'Overloaded',
};

/** The HTTP status of each error type. */
export const ERROR_STATUS: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
};

/** Sends `body` (JSON text) unless a response has already started or the socket is gone. */
export function sendJson(
  res: http.ServerResponse,
  status: number,
  body: string,
  headers: http.OutgoingHttpHeaders = {},
): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'request-id': `req_fake_${shortId()}`,
    ...headers,
  });
  res.end(body);
}

export function sendApiError(res: http.ServerResponse, spec: ApiErrorSpec): void {
  sendJson(res, spec.status, errorBody(spec.type, spec.message, spec.details));
}

export { errorBody, shortId };
