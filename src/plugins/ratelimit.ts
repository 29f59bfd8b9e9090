import fp from 'fastify-plugin';
import { AppError } from '../errors.js';

/**
 * A fixed one-minute window per tenant on the mutating requests of the scope it is registered in (the `/v1` scope), counted in Redis so it holds across replicas
 * (one INCR per request, only when enabled). Over the limit: 429 `rate_limited` with Retry-After (seconds to the
 * end of the window).
 */
export default fp<{ perMinute: number }>(
  async (app, opts) => {
    if (opts.perMinute <= 0) return;
    app.addHook('preHandler', async (req) => {
      if (req.method === 'GET' || req.method === 'HEAD') return;
      const window = Math.floor(Date.now() / 60_000);
      const key = `rl:{${req.tenant}}:${window}`;
      const n = await app.redis.incr(key);
      if (n === 1) await app.redis.expire(key, 61);
      if (n > opts.perMinute) {
        const retry = String(60 - Math.floor((Date.now() % 60_000) / 1000));
        throw new AppError(429, 'rate_limited', `More than ${opts.perMinute} requests a minute.`, undefined, {
          'retry-after': retry,
        });
      }
    });
  },
  { name: 'ratelimit', dependencies: ['redis', 'auth'] },
);
