import type { Dispatcher } from 'undici';
import { z } from 'zod';

/**
 * `MCP_SERVERS`: the MCP servers the operator declares (spec §6.2), as JSON:
 * `{"<name>": {"url": "http://…/mcp", "headers"?: {"authorization": "Bearer ${ENV_VAR}"}, "tenants"?: ["t1"]}}`.
 * Header values may name environment variables (`${NAME}`), substituted at boot; the values are secrets and are
 * never logged (pino redacts `MCP_SERVERS` and `headers`) nor put in error messages.
 */

/** A server's name, as sessions give it in `{"mcp_server": "<name>"}`. */
export const MCP_SERVER_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const TENANT = /^[A-Za-z0-9_.-]{1,64}$/;
/** An HTTP header name (RFC 9110 token). */
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;
/** `${NAME}` in a header value: a variable of the environment. */
const ENV_REF = /\$\{([A-Za-z_][A-Za-z0-9_]{0,127})\}/g;

const serverSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/, error: 'an http(s) URL, e.g. http://tools:8080/mcp' }),
  headers: z
    .record(z.string().regex(HEADER_NAME, 'an HTTP header name'), z.string().max(8192))
    .refine((h) => Object.keys(h).length <= 32, 'at most 32 headers')
    .optional(),
  tenants: z.array(z.string().regex(TENANT, 'a tenant name')).max(10_000).optional(),
});

export interface McpServerConfig {
  name: string;
  url: URL;
  /** With `${ENV}` substituted. Secrets: never log them. */
  headers: Record<string, string>;
  /** Tenants that may use the server; `null`: every tenant. */
  tenants: ReadonlySet<string> | null;
  /** Run before each connect (a tenant's server: its host's addresses checked again, src/webhooks/address-guard.ts). */
  guard?: () => Promise<void>;
  /**
   * What the transport's requests go through (a tenant's server: an agent whose every socket connects only to
   * addresses checked at that moment, so a name that resolves elsewhere after `guard` cannot reach a refused address).
   * Closed with the client.
   */
  dispatcher?: Dispatcher;
}

export type McpServersConfig = ReadonlyMap<string, McpServerConfig>;

/**
 * The zod type of `MCP_SERVERS` in the config schema: a JSON string → the servers by name. `${ENV}` references are
 * checked here (a missing variable is an issue naming the server and header) and substituted by `resolveMcpServers`.
 */
export const mcpServersVar = z.string().transform((raw, ctx): McpServersConfig => {
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (err) {
    ctx.addIssue({
      code: 'custom',
      message: `not JSON (${err instanceof Error ? err.message : String(err)}); expected {"<name>": {"url": "http://…/mcp"}}`,
    });
    return z.NEVER;
  }
  const parsed = z.record(z.string(), serverSchema).safeParse(json);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      ctx.addIssue({ code: 'custom', path: issue.path, message: issue.message });
    }
    return z.NEVER;
  }
  const servers = new Map<string, McpServerConfig>();
  for (const [name, s] of Object.entries(parsed.data)) {
    if (!MCP_SERVER_NAME.test(name)) {
      ctx.addIssue({ code: 'custom', path: [name], message: 'server names are 1-64 of [A-Za-z0-9_-]' });
      continue;
    }
    servers.set(name, {
      name,
      url: new URL(s.url),
      headers: s.headers ?? {},
      tenants: s.tenants ? new Set(s.tenants) : null,
    });
  }
  return servers;
});

/** Problems of substituting `${ENV}` in the servers' header values, by path; none when every variable is set. */
export function missingEnvRefs(servers: McpServersConfig, env: NodeJS.ProcessEnv): string[] {
  const problems: string[] = [];
  for (const s of servers.values()) {
    for (const [header, value] of Object.entries(s.headers)) {
      for (const m of value.matchAll(ENV_REF)) {
        const v = env[m[1]!];
        if (v === undefined || v === '')
          problems.push(`${s.name}.headers.${header}: the environment variable ${m[1]} is not set`);
      }
    }
  }
  return problems;
}

/** The servers with `${ENV}` in header values replaced by the variables' values (checked by `missingEnvRefs`). */
export function resolveMcpServers(servers: McpServersConfig, env: NodeJS.ProcessEnv): McpServersConfig {
  const out = new Map<string, McpServerConfig>();
  for (const [name, s] of servers) {
    const headers = Object.fromEntries(
      Object.entries(s.headers).map(([h, v]) => [h, v.replace(ENV_REF, (_, n: string) => env[n] ?? '')]),
    );
    out.set(name, { ...s, headers });
  }
  return out;
}
