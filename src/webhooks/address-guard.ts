import ipaddr from 'ipaddr.js';
import { isIP, type LookupFunction } from 'node:net';
import { InvalidRequest } from '../errors.js';
import { codeOf, resolveName } from './name-resolver.js';

/**
 * The SSRF guard of webhook URLs. A URL is checked when a webhook is created or changed, and its host's addresses
 * again at every delivery, where the connection is made to the address that was checked (the `lookup` given to
 * `http.request`), so a name that resolves elsewhere a second time (DNS rebinding) cannot reach a refused address.
 * Only globally routable unicast addresses pass: loopback, private (RFC 1918, unique local), link-local (with the
 * cloud metadata address 169.254.169.254), unspecified, carrier-grade NAT, multicast, reserved, and IPv6 forms that
 * embed an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4, Teredo) are refused, unless `allowPrivate`.
 */

const MAX_URL_LENGTH = 2048;

export const invalidUrl = (message: string) => new InvalidRequest('invalid_webhook_url', message);

/** Why the address may not be a webhook target, or null when it may. */
export function refusedAddress(address: string): string | null {
  if (!ipaddr.isValid(address)) return 'not an IP address';
  const ip = ipaddr.parse(address);
  // IPv4-compatible IPv6 (`::a.b.c.d`, ::/96, deprecated by RFC 4291): ipaddr.js calls it unicast, but a stack
  // may route it to the embedded IPv4 address (`[::127.0.0.1]` is loopback there).
  if (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).parts.slice(0, 6).every((p) => p === 0))
    return 'ipv4Compatible';
  const range = ip.range();
  return range === 'unicast' ? null : range;
}

/** The URL, parsed, if it may name a webhook endpoint (scheme, no credentials, length); 400 otherwise. */
export function parseWebhookUrl(raw: string): URL {
  if (raw.length > MAX_URL_LENGTH) throw invalidUrl(`The URL is longer than ${MAX_URL_LENGTH} characters.`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalidUrl('The URL is not an absolute URL.');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw invalidUrl('The URL must be http or https.');
  if (url.username || url.password) throw invalidUrl('The URL may not carry credentials.');
  if (!url.hostname) throw invalidUrl('The URL has no host.');
  return url;
}

/** The URL's host without IPv6 brackets. */
export const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1');

export interface CheckedAddress {
  address: string;
  family: 4 | 6;
}

/**
 * The addresses of `host`, every one of them allowed; throws 400 `invalid_webhook_url` when the name does not
 * resolve or any address is refused (a name with one private address among public ones is refused as a whole).
 */
export async function resolveChecked(host: string, allowPrivate: boolean): Promise<CheckedAddress[]> {
  let addrs: CheckedAddress[];
  const literal = isIP(host);
  if (literal === 4 || literal === 6) addrs = [{ address: host, family: literal }];
  else {
    try {
      addrs = await resolveName(host);
    } catch (err) {
      throw invalidUrl(`The host ${host} does not resolve (${codeOf(err) || 'error'}).`);
    }
  }
  if (addrs.length === 0) throw invalidUrl(`The host ${host} does not resolve.`);
  if (!allowPrivate) {
    for (const a of addrs) {
      const why = refusedAddress(a.address);
      // The address a name resolves to is not told: a tenant must not map the service's own network by its names.
      if (why)
        throw invalidUrl(
          `The host ${host} resolves to ${literal ? a.address : 'a refused address'} (${why}); only public ` +
            'addresses are allowed (WEBHOOK_ALLOW_PRIVATE=true lifts this).',
        );
    }
  }
  return addrs;
}

/**
 * A `lookup` for sockets (net.connect's option, an undici agent's `connect.lookup`) that resolves the name and checks
 * every address as `resolveChecked` does, at the moment of each connect: what a socket connects to is what was
 * checked, so a name re-pointed after an earlier check (DNS rebinding) is refused.
 */
export function checkedLookup(allowPrivate: boolean): LookupFunction {
  return (host, options, cb) => {
    resolveChecked(host, allowPrivate).then(
      (addrs) => {
        if (options.all) cb(null, addrs);
        else cb(null, addrs[0]!.address, addrs[0]!.family);
      },
      (err: unknown) =>
        cb(
          Object.assign(new Error(err instanceof Error ? err.message : String(err)), { code: 'EREFUSED' }),
          '',
        ),
    );
  };
}

/** Checks a webhook URL as given in a request: form, then every address of its host. */
export async function checkWebhookUrl(raw: string, allowPrivate: boolean): Promise<URL> {
  const url = parseWebhookUrl(raw);
  await resolveChecked(hostOf(url), allowPrivate);
  return url;
}
