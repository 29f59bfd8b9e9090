/**
 * Spec §7.2: client tokens. A tenant key mints a token scoped to one of its sessions (a client token cannot: these
 * routes declare no scope, so one is refused with 403 `scope_denied` by the auth hook), and revokes it by id. The
 * token is shown only in the mint's answer (sealed in an idempotency record, as webhook secrets are).
 */
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { eventOf } from '../src/events/schemas.js';
import { notFound, QuotaExceeded } from '../src/errors.js';
import { routeErrors } from '../src/openapi/responses.js';
import { SESSION_NOT_FOUND } from './mutations.js';
import { sealInRecord } from '../src/plugins/idempotency.js';
import { sessionIdParam } from '../src/schemas.js';
import {
  CLIENT_SCOPES,
  MAX_TOKENS_PER_SESSION,
  reservedSubject,
  sessionOfTokenId,
} from '../src/store/client-tokens.js';

const isoTime = z.string().meta({ format: 'date-time' });

const mintBody = z
  .strictObject({
    session_id: sessionIdParam.shape.id,
    // A scope named twice counts once (the token holds the set): the bound is on the list as sent.
    scopes: z
      .array(z.enum(CLIENT_SCOPES))
      .min(1)
      .max(4 * CLIENT_SCOPES.length),
    ttl_s: z.number().int().min(60).max(86_400).default(900),
    subject: z
      .string()
      .min(1)
      .max(256)
      .regex(
        /^[^\p{Cc}\p{Cf}\p{Zl}\p{Zp}]*$/u,
        'no control, format (bidi, zero-width) or line-separator characters',
      )
      // Not a `by` the service writes itself: a reader of `by` could not tell the token from the service.
      .superRefine((subject, ctx) => {
        const reserved = reservedSubject(subject);
        if (reserved) ctx.addIssue({ code: 'custom', message: reserved });
      })
      .optional()
      .meta({
        description:
          'Who holds the token (your user id): recorded as `by` on what it does. Not `timeout` (the `by` of a ' +
          "deadline's denial) nor starting with `ctk_` (a token id: the `by` of a token minted without a subject): " +
          '400 `invalid_request`, `details[].path` `/subject`.',
      }),
  })
  .meta({ id: 'CreateClientToken' });

const tokenIdParam = z.strictObject({ id: z.string().min(1).max(100) });

const clientToken = z
  .object({
    id: z.string().meta({ description: '`ctk_…`: names the token to revoke it.' }),
    object: z.literal('client_token'),
    token: z.string().meta({ description: '`ct_…`: the bearer. Shown only in this answer.' }),
    session_id: z.string(),
    scopes: z.array(z.enum(CLIENT_SCOPES)),
    subject: z.string().nullable(),
    expires_at: isoTime,
    created_at: isoTime,
  })
  .meta({ id: 'ClientToken' });

const deletedClientToken = z
  .object({ id: z.string(), object: z.literal('client_token'), deleted: z.literal(true) })
  .meta({ id: 'DeletedClientToken' });

const routes: FastifyPluginAsyncZod = async (app) => {
  const tags = ['client-tokens'];
  const tokens = app.clientTokens;

  app.post(
    '/v1/client-tokens',
    {
      schema: {
        operationId: 'createClientToken',
        summary: 'Mint a client token for one session (a browser bearer; shown only in this answer)',
        description:
          'Only a tenant key mints (a client token is refused with 403 `scope_denied`). The token authenticates ' +
          'the routes of its one session that its scopes allow; see docs/API.md "Client tokens".',
        tags,
        body: mintBody,
        response: {
          201: clientToken,
          ...routeErrors(SESSION_NOT_FOUND, 400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 503),
        },
      },
    },
    async (req, reply) => {
      const { session_id: sessionId, scopes, ttl_s: ttlS, subject } = req.body;
      await app.store.loadFor(req.tenant, sessionId);
      const out = await tokens.mint(req.tenant, sessionId, scopes, ttlS, subject ?? null, (r) =>
        eventOf('client_token.created', {
          id: r.id,
          scopes: r.scopes,
          subject: r.subject,
          expires_at: new Date(r.expires_at).toISOString(),
        }),
      );
      if (!out.ok) {
        if (out.reason === 'no_session') throw notFound();
        throw new QuotaExceeded(
          'quota_exceeded',
          `The session already holds ${MAX_TOKENS_PER_SESSION} client tokens; revoke some or let them expire.`,
          { quota: 'client_tokens_per_session', limit: MAX_TOKENS_PER_SESSION },
        );
      }
      sealInRecord(req, 'token');
      const { record } = out;
      const expiresAt = new Date(record.expires_at).toISOString();
      // Live news (no session field changes): a store outage here does not undo the token. Its bytes were counted
      // by the mint (an event not written leaves the count an upper bound).
      await app.store
        .appendEvents(sessionId, [out.event])
        .catch((err: unknown) => req.log.warn({ err }, 'client_token.created not logged'));
      return reply.code(201).send({
        id: out.id,
        object: 'client_token' as const,
        token: out.token,
        session_id: record.session_id,
        scopes: record.scopes,
        subject: record.subject,
        expires_at: expiresAt,
        created_at: new Date(record.created_at).toISOString(),
      });
    },
  );

  app.delete(
    '/v1/client-tokens/:id',
    {
      schema: {
        operationId: 'deleteClientToken',
        summary: 'Revoke a client token (at once, on every replica)',
        tags,
        params: tokenIdParam,
        response: {
          200: deletedClientToken,
          ...routeErrors({ 404: ['client_token_not_found'] }, 400, 401, 403, 404, 413, 415, 429, 500, 503),
        },
      },
    },
    async (req) => {
      const sessionId = sessionOfTokenId(req.params.id);
      if (!sessionId) throw notFound('client_token');
      const session = await app.store.load(sessionId);
      if (!session || session.tenant !== req.tenant) throw notFound('client_token');
      const revoked = eventOf('client_token.revoked', { id: req.params.id });
      const countLost = (err: unknown) =>
        req.log.warn({ err }, 'client token revoked, its bytes not given back');
      if (!(await tokens.revoke(req.tenant, sessionId, req.params.id, revoked, countLost)))
        throw notFound('client_token');
      await app.store
        .appendEvents(sessionId, [revoked])
        .catch((err: unknown) => req.log.warn({ err }, 'client_token.revoked not logged'));
      return { id: req.params.id, object: 'client_token' as const, deleted: true as const };
    },
  );
};

export default routes;
