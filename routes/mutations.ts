/**
 * What the routes that change a session (or a webhook) share: `If-Match` (its header's schema, its revision), the
 * OpenAPI answers of a mutation, and the session sent with its revision as `ETag`.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import type { MutationResult, SessionDeps } from '../src/sessions/mutate.js';
import { receiptOf, sessionView } from '../src/sessions/view.js';
import { readsSession } from '../src/plugins/auth.js';
import { withoutSecrets } from '../src/sessions/secrets.js';
import type { SessionState } from '../src/store/session-state.js';
import { mutatedSession, routeErrors, session, type RouteCodes } from '../src/openapi/responses.js';

/** A session route's 404: the session (another tenant's, or another session than a client token's, is not found). */
export const SESSION_NOT_FOUND = { 404: ['session_not_found'] } as const satisfies RouteCodes;

/** Answers of a mutation: the session, 200 when done, 202 when work was queued; and its errors. */
export const mutation = (...more: Array<409 | 422>) => ({
  200: session,
  202: session,
  ...routeErrors(SESSION_NOT_FOUND, 400, 401, 404, 412, 413, 415, 429, 500, 503, ...more),
});
export const postMutation = mutation(409, 422);

/** Answers of a mutation a client token may make (its route has a `scope`): the session, or its receipt (`send`). */
export const scopedMutation = (...more: Array<409 | 422>) => ({
  ...mutation(...more),
  200: mutatedSession,
  202: mutatedSession,
});
export const scopedPostMutation = scopedMutation(409, 422);

/** Most entity tags one If-Match may list (more is a 400: no client needs a longer list). */
export const IF_MATCH_MAX_TAGS = 16;

/** A member of an If-Match list: an entity tag, strong (`"17"`) or weak (`W/"17"`), or a bare revision (`17`). */
const MEMBER = /^(?:(W\/)?"([\x21\x23-\x7e]*)"|([0-9]{1,15}))$/;

/** A revision as the service writes it in an ETag: canonical decimal (`"017"` is another tag than `"17"`). */
const REVISION = /^(?:0|[1-9][0-9]{0,14})$/;

/** No resource has this revision: a precondition that can never hold (412 `revision_mismatch` from the store). */
const NO_REVISION = -1;

/**
 * An If-Match header (RFC 9110 §13.1.1): `*`, or a list of entity tags. The revisions it names (strong tags and
 * bare numbers; a weak tag never matches under the strong comparison If-Match uses), or `any` for `*`; null when
 * the text is none of those.
 */
function parseIfMatchText(h: string): { any: true } | { revisions: number[] } | null {
  if (h.trim() === '*') return { any: true };
  const members = h.split(',').map((m) => m.trim());
  if (members.length > IF_MATCH_MAX_TAGS) return null;
  const revisions: number[] = [];
  for (const m of members) {
    const parts = MEMBER.exec(m);
    if (!parts) return null;
    const tag = parts[3] ?? parts[2]!;
    if (parts[1] === undefined && REVISION.test(tag)) revisions.push(Number(tag));
  }
  return { revisions };
}

export const ifMatchHeader = z.looseObject({
  'if-match': z
    .string()
    .max(1024)
    .refine(
      (h) => parseIfMatchText(h) !== null,
      `If-Match takes "*" or up to ${IF_MATCH_MAX_TAGS} ETags, e.g. "17"`,
    )
    .optional()
    .meta({
      description:
        'The revision the change is for, from the ETag (`"17"`); `*` for any, or a list (`"17", "18"`, at most ' +
        `${IF_MATCH_MAX_TAGS}); a weak tag (\`W/"17"\`) never matches. 412 \`revision_mismatch\` when none matches.`,
    }),
});

/**
 * The revision a change must be written at, from the request's If-Match, for the stores (which compare one
 * revision in the same script or guarded write as the change): undefined when any revision will do (no header; `*`
 * on an existing resource). A list is resolved against `current()` (the resource's revision now, null when there is
 * none): the member that is current, pinned, so the write still fails if the resource moved meanwhile (a race that
 * answers 412, never a write at a revision the client did not name). `current` is read only for `*` and lists of
 * more than one revision.
 */
export async function resolveIfMatch(
  req: FastifyRequest,
  current: () => Promise<number | null>,
): Promise<number | undefined> {
  const h = req.headers['if-match'];
  if (typeof h !== 'string') return undefined;
  const parsed = parseIfMatchText(h);
  // The header schema refused any other text before the handler ran.
  if (parsed === null) return NO_REVISION;
  if ('any' in parsed) return (await current()) === null ? NO_REVISION : undefined;
  const { revisions } = parsed;
  if (revisions.length <= 1) return revisions[0] ?? NO_REVISION;
  const now = await current();
  return now !== null && revisions.includes(now) ? now : NO_REVISION;
}

/** resolveIfMatch for the session of the route's `:id` (its revision read only for `*` and lists). */
export const sessionIfMatch = (req: FastifyRequest<{ Params: { id: string } }>, deps: SessionDeps) =>
  resolveIfMatch(req, async () => (await deps.store.loadFor(req.tenant, req.params.id)).revision);

/** The session resource as the caller may read it: a client token's without the params' secrets. */
export function viewFor(req: FastifyRequest, s: SessionState) {
  const view = sessionView(s);
  return req.clientToken ? withoutSecrets(view) : view;
}

/**
 * What a change answers: the session as the caller may read it, or only its receipt (`SessionReceipt`) to a client
 * token without `read`, which may act on the session (post a message, decide, cancel) but not see it.
 */
function answerFor(req: FastifyRequest, s: SessionState) {
  return readsSession(req.clientToken) ? viewFor(req, s) : receiptOf(sessionView(s));
}

export function send(reply: FastifyReply, s: SessionState, code = 200) {
  return reply.code(code).header('etag', `"${s.revision}"`).send(answerFor(reply.request, s));
}

export function sendMutation(reply: FastifyReply, r: MutationResult) {
  // The change was made by an earlier request of the same Idempotency-Key whose answer was lost: this is its replay.
  if (r.replayed) reply.header('idempotent-replayed', 'true');
  return send(reply, r.state, r.queued ? 202 : 200);
}

/**
 * The session operations' deps for this request: with its Idempotency-Key's token (`SessionDeps.applied`), so its
 * change is recorded with the token and a retry after a crash does not make it twice.
 */
export const keyed = (deps: SessionDeps, req: FastifyRequest): SessionDeps =>
  req.idempotency ? { ...deps, applied: req.idempotency.token } : deps;
