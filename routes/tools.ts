import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { errors, toolList } from '../src/openapi/responses.js';

const routes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/v1/tools',
    {
      schema: {
        operationId: 'listTools',
        summary:
          'The tools the service runs: server tools, and the tools of the MCP servers the tenant may use',
        tags: ['tools'],
        response: { 200: toolList, ...errors(401, 500, 503) },
      },
    },
    async (req) => {
      const [data, mcpServers] = await Promise.all([
        app.toolbox.list(req.tenant),
        app.mcp.status(req.tenant),
      ]);
      return { data, mcp_servers: mcpServers };
    },
  );
};

export default routes;
