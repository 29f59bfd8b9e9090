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
    // A heavy read (src/plugins/write-guard.ts LATE_HEAVY_READS): the tenant's tools are up to TENANT_MAX_TOOLS
    // definitions of up to a 64 KiB schema each, so one tenant's lists of them are made one after another in its own
    // line; it takes its place there once the MCP servers' parts are in (one that does not answer keeps the list
    // waiting up to MCP_CONNECT_TIMEOUT_MS: not the tenant's other heavy reads).
    async (req, reply) => {
      const status = app.mcp.status(req.tenant);
      status.catch(() => {}); // awaited below; a list that fails first leaves no rejection unhandled
      const data = await app.toolbox.list(req.tenant, async () => {
        await status;
        return req.heavyRead ? req.heavyRead() : true;
      });
      // Its client went away while it waited in the line: the reply is hijacked, nothing to send.
      if (data === null) return reply;
      const mcpServers = await status;
      // Each entry's JSON text made once (the answer is sent as this text, not stringified again), a large one as a
      // heavy step of the tenant's: 100 tools of 64 KB schemas were 7.4 MB stringified in one turn of the loop.
      const texts: string[] = [];
      // Characters made in the current step; the first entry opens a step (asked before the work, not after it).
      let step = STRINGIFY_STEP_CHARS;
      for (const t of data) {
        if (step >= STRINGIFY_STEP_CHARS) {
          const wait = heavyStep(req.tenant);
          if (wait) await wait;
          step = 0;
        }
        const text = JSON.stringify(t);
        texts.push(text);
        step += text.length;
      }
      const body = { data, mcp_servers: mcpServers };
      return withText(body, `{"data":[${texts.join(',')}],"mcp_servers":${JSON.stringify(mcpServers)}}`);
    },
  );
};

export default routes;
