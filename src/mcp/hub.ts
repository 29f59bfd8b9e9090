import type { FastifyBaseLogger } from 'fastify';
import type { ServerTool } from '../../tools/types.js';
import type { ClaimedTool, ToolListing, ToolProvider, ToolScope } from '../toolbox.js';
import type { ToolRef } from '../store/session-state.js';
import type { McpServersConfig } from './config.js';
import type { McpServerStatus, McpTools, McpToolsOptions, ProgressSink } from './provider.js';
import { isMcpEntry } from './schema.js';
import type { TenantMcpStore } from './tenant-store.js';

/**
 * The MCP tool provider as the toolbox sees it, whether or not any server is declared: the MCP SDK (about 12 MB of
 * RSS) is loaded on first need — a session naming an MCP server, or a tenant that has servers of its own or may
 * use the operator's — and never in a replica where no tenant has any.
 */
export class McpHub implements ToolProvider {
  private loaded: Promise<McpTools> | null = null;
  private sink: ProgressSink | null = null;

  constructor(
    private readonly operator: McpServersConfig,
    readonly tenants: TenantMcpStore,
    private readonly opts: McpToolsOptions,
    private readonly log: FastifyBaseLogger,
  ) {}

  claims(entry: ToolRef): boolean {
    return isMcpEntry(entry);
  }

  /** Where `tool.progress` events go (the engine plugin sets it). */
  set progressSink(sink: ProgressSink) {
    this.sink = sink;
    void this.loaded?.then((t) => (t.progressSink = sink));
  }

  private tools(): Promise<McpTools> {
    this.loaded ??= import('./provider.js').then(({ McpTools }) => {
      const t = new McpTools(this.operator, this.tenants, this.opts, this.log);
      t.progressSink = this.sink;
      return t;
    });
    return this.loaded;
  }

  /** Whether `tenant` has any server to use (its own, or an operator's it may use). */
  private async any(tenant: string): Promise<boolean> {
    for (const s of this.operator.values()) if (s.tenants === null || s.tenants.has(tenant)) return true;
    return (await this.tenants.names(tenant)).length > 0;
  }

  async check(tenant: string, entries: readonly ToolRef[]): Promise<ClaimedTool[]> {
    return entries.some(isMcpEntry) ? (await this.tools()).check(tenant, entries) : [];
  }

  async runnables(scope: ToolScope): Promise<ServerTool[]> {
    return (await this.tools()).runnables(scope);
  }

  async list(tenant: string): Promise<ToolListing[]> {
    return (await this.any(tenant)) ? (await this.tools()).list(tenant) : [];
  }

  async status(tenant: string): Promise<McpServerStatus[]> {
    return (await this.any(tenant)) ? (await this.tools()).status(tenant) : [];
  }

  async close(): Promise<void> {
    if (this.loaded) await (await this.loaded).close();
  }
}
