import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { componentLog } from '../log.js';
import type { McpTools } from './provider.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The MCP servers of `MCP_SERVERS` (null when none are declared). */
    mcp: McpTools | null;
  }
}

export interface McpPluginOptions {
  config: Pick<Config, 'MCP_SERVERS' | 'MCP_CALL_TIMEOUT_MS' | 'MCP_TOOLS_TTL_MS' | 'MCP_CONNECT_TIMEOUT_MS'>;
}

/**
 * The MCP clients of this process, one per declared server, connected on first use. Closed on shutdown: registered
 * before the engine plugin, so its onClose runs after the engine stopped its runs (hooks run in reverse order).
 */
export default fp<McpPluginOptions>(
  async (app, { config }) => {
    const servers = config.MCP_SERVERS;
    if (!servers || servers.size === 0) {
      app.decorate('mcp', null);
      return;
    }
    const log = componentLog(app.log, 'mcp');
    // Loaded only when servers are declared: the MCP SDK costs about 12 MB of RSS in every replica that loads it.
    const { McpTools } = await import('./provider.js');
    const mcp = new McpTools(
      servers,
      {
        callTimeoutMs: config.MCP_CALL_TIMEOUT_MS,
        toolsTtlMs: config.MCP_TOOLS_TTL_MS,
        connectTimeoutMs: config.MCP_CONNECT_TIMEOUT_MS,
        log,
      },
      log,
    );
    app.decorate('mcp', mcp);
    app.addHook('onClose', async () => mcp.close());
    log.info({ mcp_servers: [...servers.keys()] }, 'MCP servers declared');
  },
  { name: 'mcp' },
);
