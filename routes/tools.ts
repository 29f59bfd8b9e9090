import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { toolSchemas } from '../tools/index.js';
import { errors, toolList } from '../src/openapi/responses.js';

const routes: FastifyPluginAsyncZod = async (app) => {
  const data = toolSchemas();
  app.get(
    '/v1/tools',
    {
      schema: {
        operationId: 'listTools',
        summary: 'The server tools, with their JSON schemas',
        tags: ['tools'],
        response: { 200: toolList, ...errors(401, 500) },
      },
    },
    async () => ({ data }),
  );
};

export default routes;
