import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { componentLog } from '../log.js';
import { parseSecretKey, SecretBox } from '../webhooks/secrets.js';
import { McpHub } from './hub.js';
import { TenantMcpStore } from './tenant-store.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The MCP servers: the operator's (`MCP_SERVERS`) and the tenants' own (`/v1/mcp-servers`). */
    mcp: McpHub;
  }
}

export interface McpPluginOptions {
  config: Pick<
    Config,
    | 'MCP_SERVERS'
    | 'MCP_CALL_TIMEOUT_MS'
    | 'MCP_CALL_MAX_MS'
    | 'MCP_TOOLS_TTL_MS'
    | 'MCP_CONNECT_TIMEOUT_MS'
    | 'TOOL_RESULT_MAX_BYTES'
    | 'MCP_TENANT_MAX_SERVERS'
    | 'MCP_TENANT_POOL_MAX'
    | 'MCP_TENANT_IDLE_MS'
    | 'MCP_PROGRESS_PER_SEC'
    | 'WEBHOOK_SECRET_KEY'
    | 'WEBHOOK_ALLOW_PRIVATE'
  >;
}

/**
 * The MCP clients of this process, connected on first use (the MCP SDK itself is loaded on first need: see
 * src/mcp/hub.ts). Tenant servers' headers are sealed with the webhooks' key (`WEBHOOK_SECRET_KEY`). Closed on
 * shutdown: registered before the engine plugin, so its onClose runs after the engine stopped its runs (hooks run
 * in reverse order).
 */
export default fp<McpPluginOptions>(
  async (app, { config }) => {
    const servers = config.MCP_SERVERS ?? new Map();
    const log = componentLog(app.log, 'mcp');
    const box = new SecretBox(
      config.WEBHOOK_SECRET_KEY ? parseSecretKey(config.WEBHOOK_SECRET_KEY) : undefined,
    );
    const tenants = new TenantMcpStore(app.redis, box, config.MCP_TENANT_MAX_SERVERS);
    const mcp = new McpHub(
      servers,
      tenants,
      {
        callTimeoutMs: config.MCP_CALL_TIMEOUT_MS,
        callMaxMs: config.MCP_CALL_MAX_MS,
        toolsTtlMs: config.MCP_TOOLS_TTL_MS,
        connectTimeoutMs: config.MCP_CONNECT_TIMEOUT_MS,
        resultMaxBytes: config.TOOL_RESULT_MAX_BYTES,
        poolMax: config.MCP_TENANT_POOL_MAX,
        idleMs: config.MCP_TENANT_IDLE_MS,
        allowPrivate: config.WEBHOOK_ALLOW_PRIVATE,
        progressPerSec: config.MCP_PROGRESS_PER_SEC,
        log,
      },
      log,
    );
    app.decorate('mcp', mcp);
    app.addHook('onClose', async () => mcp.close());
    if (servers.size > 0) log.info({ mcp_servers: [...servers.keys()] }, 'MCP servers declared');
  },
  { name: 'mcp', dependencies: ['redis'] },
);
