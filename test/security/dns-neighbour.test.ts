/**
 * The hosts of tenants' URLs are resolved by DNS queries on the event loop (src/webhooks/name-resolver.ts), not by
 * getaddrinfo on libuv's four threads: one tenant's names on a nameserver that never answers do not hold up another
 * tenant's, and each such lookup ends at its bound with a 400. A real UDP nameserver on loopback answers
 * `fast.test` and never answers `slow.test`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import { once } from 'node:events';
import { startHarness, type Harness } from '../helpers/service.js';

/** The query's question section ends after its name's labels and 4 bytes of type and class. */
function questionEnd(msg: Buffer): number {
  let at = 12;
  while (msg[at]! !== 0) at += msg[at]! + 1;
  return at + 5;
}

function questionName(msg: Buffer): string {
  const labels: string[] = [];
  for (let at = 12; msg[at]! !== 0; at += msg[at]! + 1)
    labels.push(msg.subarray(at + 1, at + 1 + msg[at]!).toString());
  return labels.join('.');
}

/** An answer to `query`: for an A query, one record 127.0.0.1; for any other type, none (NODATA). */
function answer(query: Buffer): Buffer {
  const end = questionEnd(query);
  const type = query.readUInt16BE(end - 4);
  const header = Buffer.alloc(12);
  query.copy(header, 0, 0, 2); // id
  header.writeUInt16BE(0x8180, 2); // a response, recursion desired and available, no error
  header.writeUInt16BE(1, 4);
  header.writeUInt16BE(type === 1 ? 1 : 0, 6);
  const question = query.subarray(12, end);
  if (type !== 1) return Buffer.concat([header, question]);
  const record = Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
  return Buffer.concat([header, question, record]);
}

describe('DNS of one tenant does not hold up another', { timeout: 120_000 }, () => {
  let h: Harness;
  let dns: dgram.Socket;
  const asked: string[] = [];
  before(async () => {
    dns = dgram.createSocket('udp4');
    dns.on('message', (msg, from) => {
      const name = questionName(msg);
      asked.push(name);
      if (name === 'slow.test') return;
      dns.send(answer(msg), from.port, from.address);
    });
    dns.bind(0, '127.0.0.1');
    await once(dns, 'listening');
    h = await startHarness({
      env: {
        API_KEYS: 'acme:key-acme,globex:key-globex',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        OUTBOUND_DNS_SERVERS: `127.0.0.1:${dns.address().port}`,
        OUTBOUND_DNS_TIMEOUT_MS: '1500',
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
    for (const deadline = Date.now() + 20_000; asked.filter((n) => n === 'slow.test').length < 8;) {
      assert.ok(Date.now() < deadline, `slow queries asked: ${asked.length}`);
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
});
