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
