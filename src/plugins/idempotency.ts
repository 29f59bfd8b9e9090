import fp from 'fastify-plugin';
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { AppError, zodDetails } from '../errors.js';
import { idempotencyKey } from '../store/keys.js';

declare module 'fastify' {
  interface FastifyRequest {
    idempotency?: { key: string; fingerprint: string } | undefined;
  }
}

const keyHeader = z.string().regex(/^[\x21-\x7e]{1,255}$/, 'printable ASCII, 1-255 characters');

interface Stored {
  state: 'pending' | 'done';
  fp: string;
  status?: number;
  body?: string;
  etag?: string;
}

/**
 * `Idempotency-Key` on any POST of the scope it is registered in (the `/v1` scope): the first request's answer is kept in Redis for `ttlS` seconds (so it
 * holds across replicas); the same key with the same body gets that answer again, with another body 422
 * `idempotency_key_reused`, and while the first is still being handled 409 `idempotency_in_progress`.
 * A 5xx answer is not kept, so the client may try again.
 */
export default fp<{ ttlS: number }>(
  async (app, opts) => {
    app.addHook('preHandler', async (req, reply) => {
      const raw = req.headers['idempotency-key'];
      if (req.method !== 'POST' || raw === undefined) return;
      const parsed = keyHeader.safeParse(raw);
      if (!parsed.success)
        throw new AppError(
          400,
          'invalid_request',
          'Invalid Idempotency-Key header.',
          zodDetails(parsed.error.issues, ['headers', 'idempotency-key']),
        );
      const fingerprint = createHash('sha256')
        // The route and its decoded params, not the raw URL: every spelling of one path is one request. No body,
        // `null` and `{}` are one request: the routes treat them alike.
        .update(
          `${req.method} ${req.routeOptions.url} ${JSON.stringify(req.params)}\n${JSON.stringify(req.body ?? {})}`,
        )
        .digest('base64url');
      const key = idempotencyKey(req.tenant, createHash('sha256').update(parsed.data).digest('base64url'));
      const pending: Stored = { state: 'pending', fp: fingerprint };
      const set = await app.redis.set(key, JSON.stringify(pending), 'EX', opts.ttlS, 'NX');
      if (set === 'OK') {
        req.idempotency = { key, fingerprint };
        return;
      }
      const existing = await app.redis.get(key);
      const stored: Stored | null = existing ? JSON.parse(existing) : null;
      if (!stored)
        throw new AppError(
          409,
          'idempotency_in_progress',
          'A request with this Idempotency-Key is in progress.',
        );
      if (stored.fp !== fingerprint) {
        throw new AppError(
          422,
          'idempotency_key_reused',
          'This Idempotency-Key was used with another request.',
        );
      }
      if (stored.state === 'pending') {
        throw new AppError(
          409,
          'idempotency_in_progress',
          'A request with this Idempotency-Key is in progress.',
        );
      }
      reply.header('idempotent-replayed', 'true').header('content-type', 'application/json; charset=utf-8');
      if (stored.etag) reply.header('etag', stored.etag);
      return reply.code(stored.status ?? 200).send(stored.body);
    });
    app.addHook('onSend', async (req, reply, payload) => {
      const idem = req.idempotency;
      if (!idem) return payload;
      delete req.idempotency;
      if (reply.statusCode >= 500) {
        await app.redis.del(idem.key);
        return payload;
      }
      const etag = reply.getHeader('etag');
      const stored: Stored = {
        state: 'done',
        fp: idem.fingerprint,
        status: reply.statusCode,
        body: typeof payload === 'string' ? payload : String(payload ?? ''),
        ...(typeof etag === 'string' ? { etag } : {}),
      };
      await app.redis.set(idem.key, JSON.stringify(stored), 'EX', opts.ttlS);
      return payload;
    });
  },
  { name: 'idempotency', dependencies: ['redis', 'auth'] },
);
