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
import { AppError } from '../errors.js';
import type { ClaimedTool, ToolListing, ToolProvider, ToolScope } from '../toolbox.js';
import type { McpServersConfig } from './config.js';
import { McpServerClient, type McpPoolOptions } from './pool.js';
import { isMcpEntry, type McpToolEntry } from './schema.js';

/** Names the Messages API accepts for a tool; an MCP tool named otherwise is left out (and logged). */
const API_TOOL_NAME = /^[A-Za-z0-9_-]{1,128}$/;

/** What `GET /v1/tools` says of a server besides its tools. */
export interface McpServerStatus {
  name: string;
  reachable: boolean;
  error: string | null;
  tool_count: number;
}

/** The abort signal of the run whose call is in flight (the SDK's `mcpTool` passes the client only the input). */
const callSignal = new AsyncLocalStorage<AbortSignal | undefined>();

/** Whether a crash-interrupted call may run again: the server says the tool is read-only or idempotent. */
export function idempotentTool(t: Pick<Tool, 'annotations'>): boolean {
  return t.annotations?.readOnlyHint === true || t.annotations?.idempotentHint === true;
}

/** The MCP servers of `MCP_SERVERS`, one pooled client each, as a tool provider. */
export class McpTools implements ToolProvider {
  private readonly servers = new Map<string, McpServerClient>();

  constructor(
    config: McpServersConfig,
    opts: McpPoolOptions,
    private readonly log: FastifyBaseLogger,
  ) {
    for (const [name, c] of config) this.servers.set(name, new McpServerClient(c, opts));
  }

  claims(entry: unknown): boolean {
    return isMcpEntry(entry);
  }

  private serverFor(tenant: string, name: string): McpServerClient {
    const s = this.servers.get(name);
    // Another tenant's server is not named to this one: the same answer as for no server at all.
    if (!s || !s.allows(tenant)) {
      throw new AppError(
        400,
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
        throw new AppError(400, 'duplicate_tool', `The MCP server "${e.mcp_server}" is given twice.`, {
          mcp_server: e.mcp_server,
        });
      named.add(e.mcp_server);
      this.serverFor(tenant, e.mcp_server);
    }
    const lists = await Promise.all(mcp.map((e) => this.checkEntry(tenant, e)));
    return lists.flat();
  }

  /** The tools an entry brings. An unreachable server is accepted: its names are checked when it answers. */
  private async checkEntry(tenant: string, e: McpToolEntry): Promise<ClaimedTool[]> {
    const server = this.serverFor(tenant, e.mcp_server);
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
        throw new AppError(
          400,
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
        const server = this.servers.get(e.mcp_server);
        if (!server || !server.allows(scope.tenant)) {
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
        return runnablesOf(server, picked);
      }),
    );
    return lists.flat();
  }

  async list(tenant: string): Promise<ToolListing[]> {
    const out: ToolListing[] = [];
    for (const s of this.visible(tenant)) {
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
      this.visible(tenant).map(async (s) => {
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

  private visible(tenant: string): McpServerClient[] {
    return [...this.servers.values()].filter((s) => s.allows(tenant));
  }

  async close(): Promise<void> {
    await Promise.all([...this.servers.values()].map((s) => s.close()));
  }
}

/**
 * The SDK's `mcpTools()` over the pooled client. Its `run` does not pass the run context on, so the call's abort
 * signal reaches the client through `callSignal`.
 */
function runnablesOf(server: McpServerClient, tools: readonly Tool[]): ServerTool[] {
  const client: MCPClientLike = {
    callTool: (params) => server.callTool(params.name, params.arguments, callSignal.getStore()),
  };
  // MCP's `Tool` is the SDK's `MCPToolLike` but for zod's looser spelling of `inputSchema`.
  const defs = tools.map((t): MCPToolLike => ({ ...t, inputSchema: { ...t.inputSchema, type: 'object' } }));
  return mcpTools(defs, client).map((tool, i): ServerTool => {
    const wrapped: BetaRunnableTool<Record<string, unknown>> = {
      ...tool,
      run: (input: Record<string, unknown>, ctx?: BetaToolRunContext) =>
        callSignal.run(ctx?.signal ?? undefined, () => tool.run(input, ctx)),
    };
    return { tool: wrapped, requiresApproval: false, idempotent: idempotentTool(tools[i]!) };
  });
}
