import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { health, readiness } from '../src/openapi/responses.js';

const routes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/healthz',
    {
      schema: {
        operationId: 'getHealth',
        summary: 'Liveness: the process answers',
        tags: ['health'],
        security: [],
        response: { 200: health },
      },
    },
    async () => ({ status: 'ok' as const }),
  );

  /**
   * Ready when Redis takes a write within a second (a tiny SET with PX on a health key: refused while Redis is out
   * of memory, read-only or loading, where a PING would still answer); says which model backend answers turns.
   */
  app.get(
    '/readyz',
    {
      schema: {
        operationId: 'getReadiness',
        summary: 'Readiness: Redis takes writes; which model backend answers turns',
        tags: ['health'],
        security: [],
        response: {
          200: readiness,
          503: readiness.meta({
            description: 'Not ready (Redis does not answer or refuses writes); with Retry-After.',
          }),
        },
      },
    },
    async (_req, reply) => {
      let redis: 'ok' | 'unavailable' = 'ok';
      try {
        await Promise.race([
          app.redis.set('health:write', '1', 'PX', 10_000),
          new Promise((_, reject) => setTimeout(() => reject(new Error('timeout')), 1000)),
        ]);
      } catch {
        redis = 'unavailable';
      }
      const ready = redis === 'ok';
      if (!ready) reply.header('retry-after', '2');
      return reply.code(ready ? 200 : 503).send({
        status: ready ? 'ready' : 'not_ready',
        redis,
        model: app.modelBackend,
        active_runs: app.engine.activeRuns,
        waiting_runs: app.engine.waitingRuns,
      });
    },
  );

  app.get(
    '/metrics',
    {
      schema: {
        operationId: 'getMetrics',
        summary: 'Prometheus metrics (text exposition format)',
        tags: ['health'],
        security: [],
        response: {
          200: { description: 'OK', content: { 'text/plain': { schema: z.string() } } },
        },
      },
    },
    async (_req, reply) => {
      reply.header('content-type', app.metrics.contentType);
      return app.metrics.text();
    },
  );
};

export default routes;
