import fp from 'fastify-plugin';
import rateLimit from '@fastify/rate-limit';
import type { FastifyRequest } from 'fastify';
import { QuotaExceeded } from '../errors.js';
import { TokenRate, type RateHit } from '../quotas/token-rate.js';
import { IngestBytes } from '../quotas/ingest-bytes.js';
import { HttpRefusal } from './error-status.js';

/** Reads (which include WebSocket upgrades) are never counted. */
const uncounted = (req: FastifyRequest) =>
  req.method === 'GET' || req.method === 'HEAD' || req.method === 'OPTIONS';

/**
 * `RATE_LIMIT_PER_MIN` mutating requests per tenant per minute, through `@fastify/rate-limit` with its Redis store
 * (one Lua INCR/PEXPIRE per request, so the window holds across replicas). Registered inside the authenticated
 * `/v1` scope: the key is the tenant the auth hook set, and only that scope's routes are counted. Reads (GET/HEAD,
 * which includes WebSocket upgrades) are not counted. Over the limit: 429 `rate_limited` with `Retry-After`
 * (seconds to the end of the window). A Redis error lets the request through (the route then meets the store's
 * own 503): the limiter never fails a request by itself.
 *
 * A client token (a browser's: untrusted) has a window of its own besides, `CLIENT_TOKEN_RATE_LIMIT_PER_MIN`
 * (src/quotas/token-rate.ts), so one page cannot use up its tenant's count and lock out the tenant's backend. It is
 * checked first — a `preHandler` of the scope, which runs before the tenant limiter's (a route-level `preHandler`,
 * added to each route) — so what a token is refused is not counted in its tenant's window; what it is let through
 * is counted in both.
 *
 * `TENANT_MAX_INGEST_BYTES_PER_MIN` (`ingestBytesPerMinute`, 0: off) bounds a tenant's request body bytes a minute,
 * across replicas (src/quotas/ingest-bytes.ts): checked in `preParsing`, from `Content-Length`, before the body is
 * read or parsed, so a refused body costs no parsing. Over it: 429 `rate_limited` with `Retry-After`. A body sent
 * without `Content-Length` (chunked) is not counted: BODY_LIMIT and the request count bound it.
 */
export default fp<{ perMinute: number; tokenPerMinute: number; ingestBytesPerMinute?: number }>(
  async (app, opts) => {
    const maxBytes = opts.ingestBytesPerMinute ?? 0;
    if (maxBytes > 0) {
      const bytes = new IngestBytes(app.redis, maxBytes);
      app.addHook('preParsing', async (req, _reply, payload) => {
        const len = Number(req.headers['content-length']);
        if (!req.tenant || !Number.isSafeInteger(len) || len <= 0) return payload;
        let hit: { ok: boolean; ttlMs: number };
        try {
          hit = await bytes.hit(req.tenant, len);
        } catch {
          return payload; // as the request limiter: never refused for the counter's own failure
        }
        if (hit.ok) return payload;
        const retryAfterS = Math.max(1, Math.ceil(hit.ttlMs / 1000));
        throw new HttpRefusal(
          'rate_limited',
          `More than ${maxBytes} bytes of request bodies a minute (TENANT_MAX_INGEST_BYTES_PER_MIN).`,
          { limit_bytes: maxBytes, retry_after_s: retryAfterS },
          { 'retry-after': String(retryAfterS) },
        );
      });
    }
    if (opts.tokenPerMinute > 0) {
      const windows = new TokenRate(app.redis);
      const max = opts.tokenPerMinute;
      app.addHook('preHandler', async (req, reply) => {
        const token = req.clientToken;
        if (!token || uncounted(req)) return;
        let hit: RateHit;
        try {
          hit = await windows.hit(req.tenant, token.id);
        } catch {
          return; // as skipOnError: never refused for the limiter's own failure
        }
        if (hit.count <= max) return;
        const retryAfterS = Math.max(1, Math.ceil(hit.ttlMs / 1000));
        reply
          .header('x-ratelimit-limit', max)
          .header('x-ratelimit-remaining', 0)
          .header('x-ratelimit-reset', retryAfterS)
          .header('retry-after', retryAfterS);
        throw new QuotaExceeded(
          'rate_limited',
          `More than ${max} mutating requests a minute with this client token.`,
          { limit: max, retry_after_s: retryAfterS },
        );
      });
    }
    if (opts.perMinute <= 0) return;
    await app.register(rateLimit, {
      global: true,
      hook: 'preHandler',
      max: opts.perMinute,
      timeWindow: 60_000,
      redis: app.redis,
      nameSpace: 'rl:',
      skipOnError: true,
      keyGenerator: (req) => `{${req.tenant}}`,
      allowList: uncounted,
      addHeadersOnExceeding: {
        'x-ratelimit-limit': true,
        'x-ratelimit-remaining': true,
        'x-ratelimit-reset': true,
      },
      addHeaders: {
        'x-ratelimit-limit': true,
        'x-ratelimit-remaining': true,
        'x-ratelimit-reset': true,
        'retry-after': true,
      },
      errorResponseBuilder: (_req, ctx) =>
        new QuotaExceeded('rate_limited', `More than ${ctx.max} mutating requests a minute.`, {
          limit: ctx.max,
          retry_after_s: Math.ceil(ctx.ttl / 1000),
        }),
    });
  },
  { name: 'ratelimit', dependencies: ['redis', 'auth'] },
);
