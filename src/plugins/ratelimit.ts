import fp from 'fastify-plugin';
import rateLimit from '@fastify/rate-limit';
import { QuotaExceeded } from '../errors.js';

/**
 * `RATE_LIMIT_PER_MIN` mutating requests per tenant per minute, through `@fastify/rate-limit` with its Redis store
 * (one Lua INCR/PEXPIRE per request, so the window holds across replicas). Registered inside the authenticated
 * `/v1` scope: the key is the tenant the auth hook set, and only that scope's routes are counted. Reads (GET/HEAD,
 * which includes WebSocket upgrades) are not counted. Over the limit: 429 `rate_limited` with `Retry-After`
 * (seconds to the end of the window). A Redis error lets the request through (the route then meets the store's
 * own 503): the limiter never fails a request by itself.
 */
export default fp<{ perMinute: number }>(
  async (app, opts) => {
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
      allowList: (req) => req.method === 'GET' || req.method === 'HEAD' || req.method === 'OPTIONS',
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
