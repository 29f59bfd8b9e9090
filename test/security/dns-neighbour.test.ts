/**
 * The hosts of tenants' URLs are resolved by DNS queries on the event loop (src/webhooks/name-resolver.ts), not by
 * getaddrinfo on libuv's four threads: one tenant's names on a nameserver that never answers do not hold up another
 * tenant's, and each such lookup ends at its bound with a 400; short names still go through the search list. A real
 * UDP nameserver on loopback answers `fast.test` and `short.svc.test`, never answers `slow.test`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { startDnsServer, type DnsServer } from '../helpers/dns-server.js';

describe('DNS of one tenant does not hold up another', { timeout: 120_000 }, () => {
  let h: Harness;
  let dns: DnsServer;
  before(async () => {
    dns = await startDnsServer({ 'fast.test': '127.0.0.1', 'short.svc.test': '127.0.0.1' }, ['slow.test']);
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-acme,globex:key-globex',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        OUTBOUND_DNS_SERVERS: dns.address,
        OUTBOUND_DNS_TIMEOUT_MS: '1500',
        OUTBOUND_DNS_SEARCH: 'svc.test',
      },
    });
  });
  after(async () => {
    await h?.close();
    dns?.close();
  });

  it("answers another tenant's lookups while one tenant's wait on a nameserver that never answers", async () => {
    const acme = h.api.as('key-acme');
    const globex = h.api.as('key-globex');
    let pending = 8;
    const slow = Array.from({ length: pending }, (_, i) =>
      acme.post('/v1/webhooks', { url: `http://slow.test/hook/${i}` }).finally(() => pending--),
    );
    // Every slow query has reached the nameserver before the other tenant asks.
    for (const deadline = Date.now() + 20_000; dns.asked.filter((n) => n === 'slow.test').length < 8;) {
      assert.ok(Date.now() < deadline, `slow queries asked: ${dns.asked.length}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    const fast = await globex.post('/v1/webhooks', { url: 'http://fast.test:9/hook' });
    assert.equal(fast.status, 201, JSON.stringify(fast.body));
    assert.equal(pending, 8, 'the other tenant was answered while the slow lookups still waited');
    // Each slow lookup ends at its bound (2 tries of 1.5 s), with a 400 that says so.
    for (const r of await Promise.all(slow)) {
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.error.code, 'invalid_webhook_url');
      assert.match(r.body.error.message, /slow\.test does not resolve \(ETIMEOUT\)/);
    }
  });

  it('a short name goes through the search list (OUTBOUND_DNS_SEARCH); a name that exists nowhere is a 400', async () => {
    const globex = h.api.as('key-globex');
    const short = await globex.post('/v1/webhooks', { url: 'http://short:9/hook' });
    assert.equal(short.status, 201, JSON.stringify(short.body));
    assert.ok(dns.asked.includes('short.svc.test'));
    const none = await globex.post('/v1/webhooks', { url: 'http://nothere:9/hook' });
    assert.equal(none.status, 400);
    assert.match(none.body.error.message, /nothere does not resolve \(ENOTFOUND\)/);
    assert.ok(dns.asked.includes('nothere.svc.test') && dns.asked.includes('nothere'));
  });
});
