/**
 * src/webhooks/name-resolver.ts against a real UDP nameserver on loopback and files of its own: /etc/hosts names
 * answer without a query, the search list follows resolv.conf's `ndots`, a trailing dot ends the search, localhost is
 * loopback, and a nameserver that never answers ends the lookup at its bound (2 tries of the timeout).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configureNameResolver, resolveName } from '../../src/webhooks/name-resolver.js';
import { startDnsServer, type DnsServer } from '../helpers/dns-server.js';

describe('outbound name resolution', { timeout: 60_000 }, () => {
  let dns: DnsServer;
  let dir: string;
  before(async () => {
    dns = await startDnsServer(
      {
        'api.svc.local': '10.0.0.1',
        'a.b.c': '10.0.0.2',
        'a.b.c.svc.local': '10.0.0.3',
        'top.example': '10.0.0.4',
      },
      ['slow.x.example'],
      ['api.broken.corp'],
    );
    dir = mkdtempSync(join(tmpdir(), 'resolver-'));
    writeFileSync(
      join(dir, 'hosts'),
      '# pinned\n10.9.9.9   pinned.example pinned  # alias\n::2 six.example\n::3 both.example\n10.8.8.8 both.example\n',
    );
    writeFileSync(
      join(dir, 'resolv.conf'),
      'nameserver 10.255.255.1\nsearch svc.local\noptions ndots:2 timeout:1\n',
    );
    configureNameResolver({
      timeoutMs: 300,
      servers: [dns.address],
      // Named nameservers get no system search list: the test names its own (resolv.conf gives `ndots`).
      search: ['broken.corp', 'svc.local'],
      resolvConf: join(dir, 'resolv.conf'),
      hostsFile: join(dir, 'hosts'),
    });
  });
  after(() => {
    dns?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const addresses = async (host: string) => (await resolveName(host)).map((a) => a.address);

  it('takes /etc/hosts names as they are, without a query', async () => {
    const before = dns.asked.length;
    assert.deepEqual(await addresses('PINNED.example'), ['10.9.9.9']);
    assert.deepEqual(await addresses('pinned'), ['10.9.9.9']);
    assert.deepEqual(await resolveName('six.example'), [{ address: '::2', family: 6 }]);
    assert.deepEqual(await addresses('both.example'), ['10.8.8.8', '::3'], 'IPv4 first');
    assert.deepEqual(await addresses('LocalHost.'), ['127.0.0.1', '::1']);
    assert.equal(dns.asked.length, before);
  });

  it('searches as resolv.conf says: fewer dots than ndots searched first, more tried as they are first', async () => {
    dns.asked.length = 0;
    // The first search domain's server fails (SERVFAIL): the next one is tried, as glibc does.
    assert.deepEqual(await addresses('api'), ['10.0.0.1']);
    assert.equal(dns.asked[0], 'api.broken.corp');
    assert.ok(dns.asked.includes('api.svc.local'));
    dns.asked.length = 0;
    assert.deepEqual(await addresses('a.b.c'), ['10.0.0.2']);
    assert.equal(dns.asked[0], 'a.b.c');
    // A trailing dot: the name alone.
    dns.asked.length = 0;
    await assert.rejects(resolveName('api.'), { code: 'ENOTFOUND' });
    assert.deepEqual([...new Set(dns.asked)], ['api']);
    assert.deepEqual(await addresses('top.example.'), ['10.0.0.4']);
  });

  it('a nameserver that never answers ends the lookup at its bound, and the search with it', async () => {
    dns.asked.length = 0;
    const t0 = Date.now();
    await assert.rejects(resolveName('slow.x.example'), { code: 'ETIMEOUT' });
    // 2 tries of 300 ms (each at most 300 ms), not the doubling waits of c-ares's defaults.
    assert.ok(Date.now() - t0 < 3000, `${Date.now() - t0} ms`);
    assert.ok(!dns.asked.includes('slow.x.example.svc.local'), 'no search after a timeout');
  });
});
