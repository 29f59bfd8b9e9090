/**
 * MCP servers as a tool provider (spec §6.2): a session's `{"mcp_server": "<name>", "allowed_tools"?: […]}` entries
 * become the server's tools, handed to the runner through the SDK's `mcpTools()` (helpers/beta/mcp), which converts
 * MCP content (text, image, embedded resources) to Messages API blocks and an `isError` result to an `is_error` one.
 * Each call goes through this process's pooled client of the server (src/mcp/pool.ts) with the call timeout and the
 * run's abort signal; a server that is down, slow or cut off mid-call makes the call an `is_error` result (the SDK's
 * runner turns the thrown error into one), never a failed session.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { mcpTools, type MCPClientLike, type MCPToolLike } from '@anthropic-ai/sdk/helpers/beta/mcp';
import type { BetaRunnableTool, BetaToolRunContext } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyBaseLogger } from 'fastify';
import type { ServerTool } from '../../tools/types.js';
import { InvalidRequest } from '../errors.js';
import type { ClaimedTool, ToolListing, ToolProvider, ToolScope } from '../toolbox.js';
import type { McpServersConfig } from './config.js';
import { McpServerClient, type McpPoolOptions, type McpProgress } from './pool.js';
import { isMcpEntry, type McpToolEntry } from './schema.js';
import { TenantPool, type TenantPoolOptions } from './tenant-pool.js';
import type { TenantMcpStore } from './tenant-store.js';
import { eventOf } from '../events/schemas.js';

/** The `tool` label of a tenant MCP server's calls in the metrics (their names are the tenant's). */
const TENANT_MCP_METRIC_LABEL = 'tenant_mcp';

/** Names the Messages API accepts for a tool; an MCP tool named otherwise is left out (and logged). */
const API_TOOL_NAME = /^[A-Za-z0-9_-]{1,128}$/;

/** What `GET /v1/tools` says of a server besides its tools. */
export interface McpServerStatus {
  name: string;
  reachable: boolean;
  error: string | null;
  tool_count: number;
}

/** The run's abort signal and progress sink of the call in flight (the SDK's `mcpTool` passes only the input). */
const callContext = new AsyncLocalStorage<{
  signal: AbortSignal | undefined;
  progress: ((p: McpProgress) => void) | undefined;
}>();

/** Where `tool.progress` events go: the session's event log (set by the engine plugin). */
export type ProgressSink = (session: string, events: Array<[string, string]>) => void;

/** Most `tool.progress` events of one call (beyond, they are dropped). */
const MAX_PROGRESS_EVENTS = 500;

/** Whether a crash-interrupted call may run again: the server says the tool is read-only or idempotent. */
export function idempotentTool(t: Pick<Tool, 'annotations'>): boolean {
  return t.annotations?.readOnlyHint === true || t.annotations?.idempotentHint === true;
}

export interface McpToolsOptions extends McpPoolOptions, TenantPoolOptions {
  /** `tool.progress` events per call per second (MCP_PROGRESS_PER_SEC). */
  progressPerSec: number;
}

/**
 * The MCP servers of `MCP_SERVERS` (one pooled client each) and the tenants' own (`/v1/mcp-servers`, a client per
 * (tenant, server) in a bounded pool), as a tool provider. A name resolves to the tenant's server first.
 */
export class McpTools implements ToolProvider {
  private readonly servers = new Map<string, McpServerClient>();
  private readonly tenantPool: TenantPool;
  /** Set by the engine plugin once the store exists. */
  progressSink: ProgressSink | null = null;

  constructor(
    config: McpServersConfig,
    private readonly tenants: TenantMcpStore,
    private readonly opts: McpToolsOptions,
    private readonly log: FastifyBaseLogger,
  ) {
    for (const [name, c] of config) this.servers.set(name, new McpServerClient(c, opts));
    this.tenantPool = new TenantPool(opts, opts);
  }

  claims(entry: unknown): boolean {
    return isMcpEntry(entry);
  }

  /** The tenant's server of that name, else the operator's if the tenant may use it, else null. */
  private async resolve(tenant: string, name: string): Promise<McpServerClient | null> {
    const own = await this.tenants.get(tenant, name);
    if (own) return this.tenantPool.client(tenant, own);
    const s = this.servers.get(name);
    return s && s.allows(tenant) ? s : null;
  }

  private async serverFor(tenant: string, name: string): Promise<McpServerClient> {
    const s = await this.resolve(tenant, name);
    // Another tenant's server is not named to this one: the same answer as for no server at all.
    if (!s) {
      throw new InvalidRequest(
        'unknown_tool',
        `There is no MCP server named "${name}" for this tenant. GET /v1/tools lists the servers' tools.`,
        { mcp_server: name },
      );
    }
    return s;
  }

  async check(tenant: string, entries: readonly unknown[]): Promise<ClaimedTool[]> {
    const mcp = entries.filter(isMcpEntry);
    const named = new Set<string>();
    for (const e of mcp) {
      if (named.has(e.mcp_server))
        throw new InvalidRequest('duplicate_tool', `The MCP server "${e.mcp_server}" is given twice.`, {
          mcp_server: e.mcp_server,
        });
      named.add(e.mcp_server);
      await this.serverFor(tenant, e.mcp_server);
    }
    const lists = await Promise.all(mcp.map((e) => this.checkEntry(tenant, e)));
    return lists.flat();
  }

  /** The tools an entry brings. An unreachable server is accepted: its names are checked when it answers. */
  private async checkEntry(tenant: string, e: McpToolEntry): Promise<ClaimedTool[]> {
    const server = await this.serverFor(tenant, e.mcp_server);
    const from = `mcp_server "${e.mcp_server}"`;
    let tools: readonly Tool[];
    try {
      tools = await server.listTools();
      // A name missing from a stale list may be a tool added since: look again before refusing it.
      if ((e.allowed_tools ?? []).some((n) => !tools.some((t) => t.name === n)))
        tools = await server.listTools({ wait: true });
    } catch (err) {
      this.log.warn(
        { err, tenant, mcp_server: e.mcp_server },
        'MCP server unreachable at create; its tool names are not checked',
      );
      return (e.allowed_tools ?? []).map((name) => ({ name, from }));
    }
    const offered = new Set(tools.map((t) => t.name).filter((n) => API_TOOL_NAME.test(n)));
    for (const name of e.allowed_tools ?? []) {
      if (!offered.has(name)) {
        throw new InvalidRequest(
          'unknown_tool',
          `The MCP server "${e.mcp_server}" has no tool named "${name}".`,
          { mcp_server: e.mcp_server, tool: name },
        );
      }
    }
    return (e.allowed_tools ?? [...offered]).map((name) => ({ name, from }));
  }

  async runnables(scope: ToolScope): Promise<ServerTool[]> {
    const lists = await Promise.all(
      scope.tools.filter(isMcpEntry).map(async (e): Promise<ServerTool[]> => {
        const server = await this.resolve(scope.tenant, e.mcp_server).catch((err: unknown) => {
          this.log.warn({ err, mcp_server: e.mcp_server }, 'cannot read the tenant MCP server');
          return null;
        });
        if (!server) {
          this.log.warn(
            { session: scope.session, tenant: scope.tenant, mcp_server: e.mcp_server },
            'the session names an MCP server it may not use (MCP_SERVERS changed?); its tools are left out',
          );
          return [];
        }
        let tools: readonly Tool[];
        try {
          tools = await server.listTools();
        } catch (err) {
          this.log.warn(
            { err, session: scope.session, mcp_server: e.mcp_server },
            'MCP server unreachable; its tools are left out of this run',
          );
          return [];
        }
        const allowed = e.allowed_tools ? new Set(e.allowed_tools) : null;
        const picked = tools.filter((t) => API_TOOL_NAME.test(t.name) && (!allowed || allowed.has(t.name)));
        return this.runnablesOf(server, picked, scope.session);
      }),
    );
    return lists.flat();
  }

  async list(tenant: string): Promise<ToolListing[]> {
    const out: ToolListing[] = [];
    for (const s of await this.visible(tenant)) {
      const tools: readonly Tool[] = await s.listTools().catch(() => []);
      for (const t of tools) {
        if (!API_TOOL_NAME.test(t.name)) continue;
        out.push({
          name: t.name,
          description: t.description ?? '',
          input_schema: t.inputSchema,
          requires_approval: false,
          idempotent: idempotentTool(t),
          source: 'mcp',
          mcp_server: s.config.name,
          ...(t.annotations ? { annotations: t.annotations } : {}),
        });
      }
    }
    return out;
  }

  /** The servers `tenant` may use, whether they answer now, and how many tools they offer. */
  async status(tenant: string): Promise<McpServerStatus[]> {
    return Promise.all(
      (await this.visible(tenant)).map(async (s) => {
        try {
          const tools = await s.listTools();
          return {
            name: s.config.name,
            reachable: s.error === null,
            error: s.error,
            tool_count: tools.length,
          };
        } catch (err) {
          return {
            name: s.config.name,
            reachable: false,
            error: err instanceof Error ? err.message : String(err),
            tool_count: 0,
          };
        }
      }),
    );
  }

  /** The servers `tenant` may use: its own, then the operator's of other names. */
  private async visible(tenant: string): Promise<McpServerClient[]> {
    const names = await this.tenants.names(tenant);
    const own = await Promise.all(names.sort().map((n) => this.resolve(tenant, n)));
    const out = own.filter((s): s is McpServerClient => s !== null);
    const taken = new Set(names);
    return [
      ...out,
      ...[...this.servers.values()].filter((s) => s.allows(tenant) && !taken.has(s.config.name)),
    ];
  }

  async close(): Promise<void> {
    await Promise.all([...[...this.servers.values()].map((s) => s.close()), this.tenantPool.close()]);
  }

  /**
   * The SDK's `mcpTools()` over the pooled client. Its `run` does not pass the run context on, so the call's abort
   * signal and progress sink reach the client through `callContext`.
   */
  private runnablesOf(server: McpServerClient, tools: readonly Tool[], session: string): ServerTool[] {
    const client: MCPClientLike = {
      callTool: (params) => {
        const c = callContext.getStore();
        return server.callTool(params.name, params.arguments, c?.signal, c?.progress);
      },
    };
    // An operator's server (MCP_SERVERS) names its tools in the metrics; a tenant's server does not.
    const operator = this.servers.get(server.config.name) === server;
    // MCP's `Tool` is the SDK's `MCPToolLike` but for zod's looser spelling of `inputSchema`.
    const defs = tools.map((t): MCPToolLike => ({ ...t, inputSchema: { ...t.inputSchema, type: 'object' } }));
    return mcpTools(defs, client).map((tool, i): ServerTool => {
      const wrapped: BetaRunnableTool<Record<string, unknown>> = {
        ...tool,
        run: (input: Record<string, unknown>, ctx?: BetaToolRunContext) => {
          const progress = ctx?.toolUse.id
            ? this.progressOf(session, ctx.toolUse.id, tools[i]!.name)
            : undefined;
          return callContext.run({ signal: ctx?.signal ?? undefined, progress }, () => tool.run(input, ctx));
        },
      };
      return {
        tool: wrapped,
        requiresApproval: false,
        idempotent: idempotentTool(tools[i]!),
        ...(operator ? {} : { metricLabel: TENANT_MCP_METRIC_LABEL }),
      };
    });
  }

  /**
   * A call's progress notices as `tool.progress` events, at most `progressPerSec` a second and
   * `MAX_PROGRESS_EVENTS` in all (the notice that reaches `total` always goes): a chatty server cannot flood the log.
   */
  private progressOf(session: string, toolUseId: string, name: string): (p: McpProgress) => void {
    const interval = 1000 / this.opts.progressPerSec;
    let last = -Infinity;
    let sent = 0;
    return (p) => {
      const now = performance.now();
      const final = p.total !== undefined && p.progress >= p.total;
      if (sent >= MAX_PROGRESS_EVENTS || (!final && now - last < interval)) return;
      last = now;
      sent++;
      this.progressSink?.(session, [eventOf('tool.progress', { tool_use_id: toolUseId, name, ...p })]);
    };
  }
}
