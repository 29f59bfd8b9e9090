/**
 * What the routes that change a session (or a webhook) share: `If-Match` (its header's schema, its revision), the
 * OpenAPI answers of a mutation, and the session sent with its revision as `ETag`.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { MutationResult } from '../src/sessions/mutate.js';
import { sessionView } from '../src/sessions/view.js';
import type { SessionState } from '../src/store/session-state.js';
import { routeErrors, session, type RouteCodes } from '../src/openapi/responses.js';

export const ifMatchHeader = z.looseObject({
  'if-match': z
    .string()
    .regex(/^(W\/)?"?\d+"?$/, 'If-Match takes the revision from the ETag, e.g. "17"')
    .optional(),
});

/** A session route's 404: the session (another tenant's, or another session than a client token's, is not found). */
export const SESSION_NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

/** Answers of a mutation: the session, 200 when done, 202 when work was queued; and its errors. */
export const mutation = (...more: Array<409 | 422>) => ({
  200: session,
  202: session,
  ...routeErrors(SESSION_NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503, ...more),
});
export const postMutation = mutation(409, 422);

export function parseIfMatch(req: FastifyRequest): number | undefined {
  const h = req.headers['if-match'];
  if (typeof h !== 'string') return undefined;
  return Number(h.replace(/^W\//, '').replace(/"/g, ''));
}

export function send(reply: FastifyReply, s: SessionState, code = 200) {
  return reply.code(code).header('etag', `"${s.revision}"`).send(sessionView(s));
}

export function sendMutation(reply: FastifyReply, r: MutationResult) {
  return send(reply, r.state, r.queued ? 202 : 200);
}
