import { z } from 'zod';
import { InternalError, RevisionMismatch, notFound, quotaExceeded } from '../errors.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import type { SecretBox } from '../webhooks/secrets.js';
import './lua/commands.js';

/**
 * Tenant MCP servers (spec §7.1, `/v1/mcp-servers`) in Redis: one hash per tenant, `mcps:{<tenant>}`, name → record
 * JSON `{url, headers, header_names, created_at, updated_at, revision}`. The headers (their values are credentials)
 * are sealed as one JSON object with the webhooks' box (`WEBHOOK_SECRET_KEY`, src/webhooks/secrets.ts); only their
 * names are ever shown. The count per tenant is bounded atomically with the write (lua/put-1.lua).
 */

const tenantServersKey = (tenant: string) => `mcps:{${tenant}}`;

const recordSchema = z.object({
  url: z.string(),
  headers: z.string(),
  header_names: z.array(z.string()).or(z.object({}).transform(() => [])),
  created_at: z.number(),
  updated_at: z.number(),
  revision: z.number(),
});

/** A tenant's server as routes show it: header values never. */
export interface TenantMcpView {
  name: string;
  url: string;
  /** The header names, each with a redacted value. */
  headers: Record<string, typeof REDACTED>;
  created_at: string;
  updated_at: string;
  revision: number;
}

/** A tenant's server as the pool connects to it: the headers opened. */
export interface TenantMcpServer {
  name: string;
  url: string;
  headers: Record<string, string>;
  revision: number;
}

const REDACTED = '[redacted]';

type StoredRecord = z.infer<typeof recordSchema>;

function parse(raw: string): StoredRecord | null {
  try {
    const r = recordSchema.safeParse(JSON.parse(raw));
    return r.success ? r.data : null;
  } catch {
    return null;
  }
}

function view(name: string, r: StoredRecord): TenantMcpView {
  return {
    name,
    url: r.url,
    headers: Object.fromEntries(r.header_names.map((h): [string, typeof REDACTED] => [h, REDACTED])),
    created_at: new Date(r.created_at).toISOString(),
    updated_at: new Date(r.updated_at).toISOString(),
    revision: r.revision,
  };
}

export class TenantMcpStore {
  constructor(
    private readonly redis: RedisClient,
    private readonly box: SecretBox,
    readonly maxPerTenant: number,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'mcp');
  }

  /** Registers or replaces `name` (429 `quota_exceeded` beyond `maxPerTenant` servers). One script. */
  async put(
    tenant: string,
    name: string,
    url: string,
    headers: Record<string, string>,
    ifMatch?: number,
  ): Promise<{ created: boolean; server: TenantMcpView }> {
    const sealed = this.box.seal(JSON.stringify(headers));
    const [outcome, revision] = await this.redis.mcpPut(
      tenantServersKey(tenant),
      name,
      url,
      sealed,
      JSON.stringify(Object.keys(headers)),
      Date.now(),
      this.maxPerTenant,
      ifMatch === undefined ? '' : String(ifMatch),
    );
    if (outcome === -1) throw quotaExceeded('MCP_TENANT_MAX_SERVERS', this.maxPerTenant, 'MCP servers');
    if (outcome === -2) throw new RevisionMismatch(revision, 'MCP server');
    const server = await this.view(tenant, name);
    return { created: outcome === 1, server };
  }

  /** The server as shown; 404 `mcp_server_not_found` when the tenant has none of that name. */
  async view(tenant: string, name: string): Promise<TenantMcpView> {
    const r = await this.record(tenant, name);
    if (!r) throw notFound('mcp_server');
    return view(name, r);
  }

  /** The tenant's servers, by name. One HGETALL (at most `maxPerTenant` fields). */
  async list(tenant: string): Promise<TenantMcpView[]> {
    const h = await this.redis.hgetall(tenantServersKey(tenant));
    const out: TenantMcpView[] = [];
    for (const [name, raw] of Object.entries(h)) {
      const r = parse(raw);
      if (r) out.push(view(name, r));
    }
    return out.sort((a, b) => a.name.localeCompare(b.name));
  }

  /** The server to connect to, headers opened; null when the tenant has none of that name. One HGET. */
  async get(tenant: string, name: string): Promise<TenantMcpServer | null> {
    const r = await this.record(tenant, name);
    if (!r) return null;
    let headers: Record<string, string>;
    try {
      headers = z.record(z.string(), z.string()).parse(JSON.parse(this.box.open(r.headers)));
    } catch (err) {
      throw new InternalError('The headers of the MCP server cannot be opened.', { cause: err });
    }
    return { name, url: r.url, headers, revision: r.revision };
  }

  /** The names of the tenant's servers. One HKEYS. */
  names(tenant: string): Promise<string[]> {
    return this.redis.hkeys(tenantServersKey(tenant));
  }

  /** Forgets the server; 404 when there was none, 412 when `ifMatch` is not its revision. One script. */
  async delete(tenant: string, name: string, ifMatch?: number): Promise<void> {
    const [outcome, revision] = await this.redis.mcpRemove(
      tenantServersKey(tenant),
      name,
      ifMatch === undefined ? '' : String(ifMatch),
    );
    if (outcome === 0) throw notFound('mcp_server');
    if (outcome === -2) throw new RevisionMismatch(revision, 'MCP server');
  }

  private async record(tenant: string, name: string): Promise<StoredRecord | null> {
    const raw = await this.redis.hget(tenantServersKey(tenant), name);
    return raw === null ? null : parse(raw);
  }
}
