import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { toolSchemas } from '../tools/index.js';

const routes: FastifyPluginAsyncZod = async (app) => {
  const data = toolSchemas();
  app.get('/v1/tools', { schema: { tags: ['tools'] } }, async () => ({ data }));
};

export default routes;
