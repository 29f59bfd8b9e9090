import { Resolver } from 'node:dns/promises';

/**
 * How the hosts of tenants' URLs (webhooks, HTTP tools, tenant MCP servers) are resolved: by DNS queries on the
 * event loop (c-ares, `Resolver`), never by `dns.lookup`. `lookup` is getaddrinfo on libuv's thread pool (4 threads
 * shared with file and crypto work): a tenant whose names point at a nameserver that never answers held a thread
 * per lookup for the resolver's whole retry time, and four of them stopped every other tenant's deliveries and
 * tool calls. Here a query waits on a socket, bounded by OUTBOUND_DNS_TIMEOUT_MS per try (2 tries).
 *
 * `localhost` and `*.localhost` are loopback (RFC 6761) without a query; other names are not looked up in
 * /etc/hosts (only DNS, as /etc/resolv.conf or OUTBOUND_DNS_SERVERS names the servers).
 */

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export interface NameResolverOptions {
  /** Per try (ms); each name is tried twice per server. */
  timeoutMs: number;
  /** `host` or `host:port` of the nameservers to ask instead of the system's (empty: the system's). */
  servers: string[];
}

let resolver = new Resolver({ timeout: 2000, tries: 2 });

/** Sets how names are resolved, once at boot (src/app.ts). */
export function configureNameResolver(opts: NameResolverOptions): void {
  resolver = new Resolver({ timeout: opts.timeoutMs, tries: 2 });
  if (opts.servers.length > 0) resolver.setServers(opts.servers);
}

const isLocalhost = (host: string) => {
  const h = host.toLowerCase().replace(/\.$/, '');
  return h === 'localhost' || h.endsWith('.localhost');
};

/**
 * The IPv4 and IPv6 addresses of `host` (a name, not an IP literal). Rejects with the error of the A query (its
 * `code`: ENOTFOUND, ETIMEOUT, ECONNREFUSED…) when neither query found an address.
 */
export async function resolveName(host: string): Promise<ResolvedAddress[]> {
  if (isLocalhost(host)) {
    return [
      { address: '127.0.0.1', family: 4 },
      { address: '::1', family: 6 },
    ];
  }
  const [v4, v6] = await Promise.allSettled([resolver.resolve4(host), resolver.resolve6(host)]);
  const out: ResolvedAddress[] = [];
  if (v4.status === 'fulfilled') for (const address of v4.value) out.push({ address, family: 4 });
  if (v6.status === 'fulfilled') for (const address of v6.value) out.push({ address, family: 6 });
  if (out.length === 0 && v4.status === 'rejected') throw v4.reason;
  return out;
}
