import { Agent } from 'undici';
import { checkedLookup, hostOf, resolveChecked } from '../webhooks/address-guard.js';
import { McpServerClient, type McpPoolOptions } from './pool.js';
import type { TenantMcpServer } from './tenant-store.js';

export interface TenantPoolOptions {
  /** MCP_TENANT_POOL_MAX: clients kept in this process, over all tenants. */
  poolMax: number;
  /** MCP_TENANT_IDLE_MS: a client unused this long is closed. */
  idleMs: number;
  /** WEBHOOK_ALLOW_PRIVATE: a tenant's server may be on a private address. */
  allowPrivate: boolean;
}

interface Entry {
  client: McpServerClient;
  revision: number;
}

/**
 * The clients of tenants' MCP servers in this process, one per (tenant, server) and revision of its record: a PUT
 * that replaces the server (any replica) makes the next use connect anew with the new URL and headers. Bounded: at
 * `poolMax` the least recently used idle client is closed; a sweep closes clients idle for `idleMs`. Each connect
 * checks the server's addresses again with the webhooks' guard (a name that now resolves to a private address is
 * refused unless `allowPrivate`).
 */
export class TenantPool {
  /** In use order: the least recently used first. */
  private readonly entries = new Map<string, Entry>();
  private readonly sweep: NodeJS.Timeout;

  constructor(
    private readonly clientOpts: McpPoolOptions,
    private readonly opts: TenantPoolOptions,
  ) {
    this.sweep = setInterval(() => this.evictIdle(), Math.min(opts.idleMs, 60_000));
    this.sweep.unref();
  }

  client(tenant: string, server: TenantMcpServer): McpServerClient {
    const key = `${tenant}\n${server.name}`;
    const had = this.entries.get(key);
    this.entries.delete(key);
    if (had && had.revision === server.revision) {
      this.entries.set(key, had);
      return had.client;
    }
    if (had) void had.client.close();
    const url = new URL(server.url);
    const client = new McpServerClient(
      {
        name: server.name,
        url,
        headers: server.headers,
        tenants: new Set([tenant]),
        guard: async () => {
          await resolveChecked(hostOf(url), this.opts.allowPrivate);
        },
        // Every socket checked as it connects (the guard's answer names the refusal; this holds it).
        dispatcher: new Agent({ connect: { lookup: checkedLookup(this.opts.allowPrivate) } }),
      },
      this.clientOpts,
    );
    this.entries.set(key, { client, revision: server.revision });
    this.bound();
    return client;
  }

  /** Over `poolMax`: closes the least recently used clients with no call in flight. */
  private bound(): void {
    for (const [key, e] of this.entries) {
      if (this.entries.size <= this.opts.poolMax) return;
      if (e.client.busy) continue;
      this.entries.delete(key);
      void e.client.close();
    }
  }

  private evictIdle(): void {
    const before = Date.now() - this.opts.idleMs;
    for (const [key, e] of this.entries) {
      if (e.client.lastUsed < before && !e.client.busy) {
        this.entries.delete(key);
        void e.client.close();
      }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweep);
    const all = [...this.entries.values()];
    this.entries.clear();
    await Promise.all(all.map((e) => e.client.close()));
  }
}
