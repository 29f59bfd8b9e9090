import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';

const routes: FastifyPluginAsyncZod = async (app) => {
  app.get('/healthz', { schema: { tags: ['health'] } }, async () => ({ status: 'ok' }));

  /** Ready when Redis answers PING within a second; says which model backend answers turns. */
  app.get('/readyz', { schema: { tags: ['health'] } }, async (_req, reply) => {
    let redis = 'ok';
    try {
      await Promise.race([
        app.redis.ping(),
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
  });

  app.get('/metrics', { schema: { tags: ['health'], hide: true } }, async (_req, reply) => {
    reply.header('content-type', app.metrics.contentType);
    return app.metrics.text();
  });
};

export default routes;
