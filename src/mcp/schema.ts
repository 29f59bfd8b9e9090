import { z } from 'zod';

/**
 * A session's `tools` entry naming an MCP server (spec §6.2): `{"mcp_server": "<name>", "allowed_tools"?: [names]}`.
 * The server is one the operator declared in `MCP_SERVERS` and the tenant may use; `allowed_tools` picks some of its
 * tools (all of them when absent). Kept here, apart from `src/schemas.ts`, so the other forms of a tool entry (and
 * PATCH `tools`) take it as it is.
 */
export const mcpToolEntry = z.strictObject({
  mcp_server: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'MCP server names are 1-64 of [A-Za-z0-9_-]'),
  allowed_tools: z
    .array(z.string().regex(/^[A-Za-z0-9_-]{1,128}$/, 'tool names are 1-128 of [A-Za-z0-9_-]'))
    .min(1)
    .max(256)
    .optional(),
});

export type McpToolEntry = z.infer<typeof mcpToolEntry>;

/** Whether a stored tool entry names an MCP server. */
export function isMcpEntry(t: unknown): t is McpToolEntry {
  return typeof t === 'object' && t !== null && 'mcp_server' in t && typeof t.mcp_server === 'string';
}

/** Largest `mcp_toolset` entry accepted, as JSON. */
const MCP_TOOLSET_MAX_BYTES = 16_384;

/**
 * Anthropic's MCP connector: a `tools` entry `{"type": "mcp_toolset", "mcp_server_name": "<name>", …}` naming one
 * of the servers of `params.mcp_servers`. The API connects to that server and runs its tools itself (its replies
 * carry `mcp_tool_use` / `mcp_tool_result` blocks); the service passes the entry through as given.
 */
export const mcpToolsetEntry = z
  .looseObject({
    type: z.literal('mcp_toolset'),
    mcp_server_name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'MCP server names are 1-64 of [A-Za-z0-9_-]'),
  })
  .refine((t) => JSON.stringify(t).length <= MCP_TOOLSET_MAX_BYTES, {
    message: `an mcp_toolset entry is at most ${MCP_TOOLSET_MAX_BYTES} bytes as JSON`,
  })
  .meta({
    description: "Anthropic's MCP connector: the tools of a server of `params.mcp_servers`, run by the API.",
  });

export type McpToolsetEntry = z.infer<typeof mcpToolsetEntry>;

/**
 * An `mcp_toolset`'s key in a tool set (its definition has no name): the service's own, never sent to the API, which
 * names a toolset by its server (`mcp_toolset_reference`).
 */
export const mcpToolsetKey = (server: string): string => `mcp_toolset:${server}`;

/** Whether a stored tool entry is an `mcp_toolset` (the API's MCP connector). */
export function isMcpToolset(t: unknown): t is McpToolsetEntry {
  return typeof t === 'object' && t !== null && 'type' in t && t.type === 'mcp_toolset';
}
