import { setImmediate as turn } from 'node:timers/promises';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { errors, toolList } from '../src/openapi/responses.js';
import { withText } from '../src/openapi/serializer.js';
import { heavyStep } from '../src/tenant-turns.js';

/** Characters of entries' JSON text made in one heavy step of their tenant's (tenant-turns.ts). */
const STRINGIFY_STEP_CHARS = 64 * 1024;

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
    // A heavy read (src/plugins/write-guard.ts HEAVY_READS): the tenant's tools are up to TENANT_MAX_TOOLS
    // definitions of up to a 64 KiB schema each, so one tenant's lists are made one after another in its own line.
    async (req) => {
      const [data, mcpServers] = await Promise.all([
        app.toolbox.list(req.tenant),
        app.mcp.status(req.tenant),
      ]);
      // Each entry's JSON text made once (the answer is sent as this text, not stringified again), a large one as a
      // heavy step of the tenant's: 100 tools of 64 KB schemas were 7.4 MB stringified in one turn of the loop.
      const texts: string[] = [];
      let step = 0;
      for (const t of data) {
        const text = JSON.stringify(t);
        texts.push(text);
        step += text.length;
        // A turn of the event loop once a step's worth is made (in the tenant's line of heavy steps): the next
        // entries are made in another turn.
        if (step >= STRINGIFY_STEP_CHARS) {
          await (heavyStep(req.tenant) ?? turn());
          step = 0;
        }
      }
      const body = { data, mcp_servers: mcpServers };
      return withText(body, `{"data":[${texts.join(',')}],"mcp_servers":${JSON.stringify(mcpServers)}}`);
    },
  );
};

export default routes;
