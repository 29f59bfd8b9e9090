import { readFileSync } from 'node:fs';
import { Resolver } from 'node:dns/promises';

/**
 * How the hosts of tenants' URLs (webhooks, HTTP tools, tenant MCP servers) are resolved: by DNS queries on the
 * event loop (c-ares, `Resolver`), never by `dns.lookup`. `lookup` is getaddrinfo on libuv's thread pool (4 threads
 * shared with file and crypto work): a tenant whose names point at a nameserver that never answers held a thread
 * per lookup for the resolver's whole retry time, and four of them stopped every other tenant's deliveries and
 * tool calls. Here a query waits on a socket: OUTBOUND_DNS_TIMEOUT_MS per try, 2 tries per nameserver.
 *
 * What getaddrinfo did besides, done here as it did it: `localhost` and `*.localhost` are loopback (RFC 6761); a
 * name in /etc/hosts takes its addresses from there (read at boot); a name without a trailing dot goes through the
 * search list of /etc/resolv.conf (or OUTBOUND_DNS_SEARCH; none when OUTBOUND_DNS_SERVERS names other nameservers)
 * with its `ndots` rule, so a cluster's short service names resolve as before. A candidate that does not exist
 * (NXDOMAIN, no address) or whose server fails (SERVFAIL) moves on to the next; a timeout or a refusal ends the
 * lookup. IPv4 addresses come before IPv6 ones.
 */

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export interface NameResolverOptions {
  /** Per try (ms); each name is tried twice per nameserver. */
  timeoutMs: number;
  /** `host` or `host:port` of the nameservers to ask instead of the system's (empty: the system's). */
  servers: string[];
  /** The search list instead of /etc/resolv.conf's (null: that file's). */
  search: string[] | null;
  /** Where the system's files are (tests). */
  resolvConf?: string;
  hostsFile?: string;
}

interface Lookup {
  resolver: Resolver;
  search: string[];
  ndots: number;
  hosts: Map<string, ResolvedAddress[]>;
}

let current: Lookup = {
  resolver: new Resolver({ timeout: 2000, tries: 2, maxTimeout: 2000 }),
  search: [],
  ndots: 1,
  hosts: new Map(),
};

const readOr = (path: string): string => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
};

/** `search` (or `domain`: the last of them counts, as in glibc) and `options ndots:n` of a resolv.conf. */
function resolvConfOf(text: string): { search: string[]; ndots: number } {
  let search: string[] = [];
  let ndots = 1;
  for (const raw of text.split('\n')) {
    const words = raw
      .replace(/[#;].*/, '')
      .trim()
      .split(/\s+/);
    if (words[0] === 'search' || words[0] === 'domain') search = words.slice(1).filter(Boolean);
    else if (words[0] === 'options') {
      for (const opt of words.slice(1)) {
        const m = /^ndots:(\d{1,2})$/.exec(opt);
        if (m) ndots = Math.min(15, Number(m[1]));
      }
    }
  }
  return { search: search.map((d) => d.toLowerCase().replace(/\.$/, '')), ndots };
}

/** The names of a hosts file, each with its addresses. */
function hostsOf(text: string): Map<string, ResolvedAddress[]> {
  const out = new Map<string, ResolvedAddress[]>();
  for (const raw of text.split('\n')) {
    const [address, ...names] = raw.replace(/#.*/, '').trim().split(/\s+/);
    if (!address || names.length === 0) continue;
    const family = address.includes(':') ? 6 : 4;
    for (const name of names) {
      const key = name.toLowerCase();
      const list = out.get(key) ?? [];
      list.push({ address, family });
      out.set(key, list);
    }
  }
  // IPv4 first, as the DNS answers are (a socket given one address connects to the first).
  for (const list of out.values()) list.sort((a, b) => a.family - b.family);
  return out;
}

/** Sets how names are resolved, once at boot (src/app.ts). */
export function configureNameResolver(opts: NameResolverOptions): void {
  const resolver = new Resolver({ timeout: opts.timeoutMs, tries: 2, maxTimeout: opts.timeoutMs });
  if (opts.servers.length > 0) resolver.setServers(opts.servers);
  const conf = resolvConfOf(readOr(opts.resolvConf ?? '/etc/resolv.conf'));
  current = {
    resolver,
    // Nameservers named for these lookups are not the system's: its search list would send them the cluster's names.
    search: opts.search ?? (opts.servers.length > 0 ? [] : conf.search),
    ndots: conf.ndots,
    hosts: hostsOf(readOr(opts.hostsFile ?? '/etc/hosts')),
  };
}

/** The names to ask for `name`, in order (glibc's res_search). */
function candidates(name: string, absolute: boolean, l: Lookup): string[] {
  if (absolute || l.search.length === 0) return [name];
  const searched = l.search.map((d) => `${name}.${d}`);
  const dots = name.split('.').length - 1;
  return dots >= l.ndots ? [name, ...searched] : [...searched, name];
}

/** The answers' error codes that say the name (or an address of its kind) does not exist: try the next. */
const ABSENT = new Set(['ENOTFOUND', 'ENODATA']);
/** An error's `code` (a resolver's: ENOTFOUND, ETIMEOUT…), '' when it has none. */
export const codeOf = (err: unknown) => (err instanceof Error && 'code' in err ? String(err.code) : '');

/** The A and AAAA records of one name; empty when it has none; throws on a failure other than absence. */
async function query(resolver: Resolver, name: string): Promise<ResolvedAddress[]> {
  const [v4, v6] = await Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]);
  const out: ResolvedAddress[] = [];
  if (v4.status === 'fulfilled') for (const address of v4.value) out.push({ address, family: 4 });
  if (v6.status === 'fulfilled') for (const address of v6.value) out.push({ address, family: 6 });
  if (out.length > 0) return out;
  for (const r of [v4, v6]) if (r.status === 'rejected' && !ABSENT.has(codeOf(r.reason))) throw r.reason;
  return [];
}

/**
 * The IPv4 and IPv6 addresses of `host` (a name, not an IP literal). Rejects with the resolver's error (its `code`:
 * ENOTFOUND when no candidate exists, ETIMEOUT, ECONNREFUSED…).
 */
export async function resolveName(host: string): Promise<ResolvedAddress[]> {
  const absolute = host.endsWith('.');
  const name = host.toLowerCase().replace(/\.$/, '');
  if (name === 'localhost' || name.endsWith('.localhost')) {
    return [
      { address: '127.0.0.1', family: 4 },
      { address: '::1', family: 6 },
    ];
  }
  const l = current;
  const listed = l.hosts.get(name);
  if (listed) return listed;
  const names = candidates(name, absolute, l);
  // A candidate whose server fails (SERVFAIL: a broken search domain) moves on too, as glibc's search does; the
  // first such failure is the answer when no candidate has an address.
  let failed: unknown = null;
  for (const candidate of names) {
    try {
      const found = await query(l.resolver, candidate);
      if (found.length > 0) return found;
    } catch (err) {
      if (codeOf(err) !== 'ESERVFAIL' || names.length === 1) throw err;
      failed ??= err;
    }
  }
  if (failed) throw failed;
  throw Object.assign(new Error(`queryA ENOTFOUND ${name}`), { code: 'ENOTFOUND', hostname: name });
}
