/**
 * Issue 22 item 7: the edges. Path traversal under /docs/static, a URL the router cannot decode and what Node's
 * parser refuses are answered in the error envelope (never a 500); `x-request-id` is kept only when well-formed and
 * echoed on every answer; IPv4-compatible and -mapped IPv6 are refused by the address guard; a turn of 200,000
 * deltas completes (no RangeError from spreading the relay's buffer); a stalled upstream stream is aborted after
 * UPSTREAM_IDLE_MS and fails the run with a retryable upstream error.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { refusedAddress } from '../../src/webhooks/address-guard.js';
import { text } from '../fake/script.js';

/** Sends `raw` on a new connection and reads the whole answer (the service closes or the answer ends). */
function raw(base: string, request: string): Promise<{ status: number; head: string; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(u.port), u.hostname);
    let data = '';
    s.on('data', (c) => {
      data += c;
      const end = data.indexOf('\r\n\r\n');
      const len = /content-length: (\d+)/i.exec(data.slice(0, end));
      if (end >= 0 && len && data.length >= end + 4 + Number(len[1])) s.destroy();
    });
    s.on('close', () => {
      const end = data.indexOf('\r\n\r\n');
      resolve({ status: Number(data.slice(9, 12)), head: data.slice(0, end), body: data.slice(end + 4) });
    });
    s.on('error', reject);
    s.write(request);
  });
}

describe('edges', { timeout: 120_000 }, () => {
  let h: Harness;
  let api: Api;

  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-acme', UPSTREAM_IDLE_MS: '700' } });
    api = h.api;
  });
  after(async () => h?.close());

  it('answers path traversal, bad URLs and parser errors in the error envelope, never 500', async () => {
    for (const path of [
      '/docs/static/../..',
      '/docs/static/%2e%2e/%2e%2e/package.json',
      '/docs/static/..%2f..%2fpackage.json',
    ]) {
      const r = await raw(
        h.service.url,
        `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
      );
      assert.ok(r.status === 404 || r.status === 403, `${path}: ${r.status}`);
      assert.ok(JSON.parse(r.body).error.code, `${path}: ${r.body}`);
    }
    const bad = await raw(
      h.service.url,
      'GET /v1/sessions/%ff HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n',
    );
    assert.equal(bad.status, 400);
    assert.equal(JSON.parse(bad.body).error.code, 'invalid_request');
    const big = await raw(
      h.service.url,
      `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
    );
    assert.equal(big.status, 431);
    assert.equal(JSON.parse(big.body).error.code, 'headers_too_large');
    const garbage = await raw(h.service.url, 'NOT A REQUEST\r\n\r\n');
    assert.equal(garbage.status, 400);
    assert.equal(JSON.parse(garbage.body).error.code, 'invalid_request');
  });

  it("answers Node's own refusals (no Host, an Expect it cannot meet) in the envelope, with a request id", async () => {
    /** The answer's `x-request-id` header, which its body's `request_id` must repeat. */
    const idOf = (head: string, body: string) => {
      const header = /\r\nx-request-id: *([^\r]*)/i.exec(head)?.[1];
      assert.ok(header, head);
      assert.equal(JSON.parse(body).error.request_id, header);
      return header;
    };
    // HTTP/1.1 requires Host (RFC 9112 §3.2): Node answered a bare 400 before the app saw the request.
    for (const path of ['/healthz', '/v1/sessions']) {
      const noHost = await raw(h.service.url, `GET ${path} HTTP/1.1\r\nConnection: close\r\n\r\n`);
      assert.equal(noHost.status, 400, `${path}: ${noHost.head}`);
      const body = JSON.parse(noHost.body);
      assert.equal(body.error.code, 'invalid_request', noHost.body);
      assert.match(body.error.message, /Host/);
      assert.deepEqual(
        body.error.details.map((d: { path: string }) => d.path),
        ['/host'],
      );
      assert.match(idOf(noHost.head, noHost.body), /^req_[0-9a-f]{16}$/);
    }
    // A client's well-formed id is kept, as on any other answer.
    const traced = await raw(
      h.service.url,
      'GET /healthz HTTP/1.1\r\nX-Request-Id: trace-no-host\r\nConnection: close\r\n\r\n',
    );
    assert.equal(traced.status, 400);
    assert.equal(idOf(traced.head, traced.body), 'trace-no-host');
    // HTTP/1.0 has no Host requirement: answered as before.
    const old = await raw(h.service.url, 'GET /healthz HTTP/1.0\r\n\r\n');
    assert.equal(old.status, 200, old.head);

    // An expectation other than 100-continue: Node answered a bare 417 (RFC 9110 §10.1.1).
    for (const expect of ['something-else', '200-ok', 'foo=bar; x']) {
      const r = await raw(
        h.service.url,
        `POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: ${expect}\r\nX-Request-Id: trace-expect\r\n` +
          'Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}',
      );
      assert.equal(r.status, 417, `${expect}: ${r.head}`);
      assert.equal(JSON.parse(r.body).error.code, 'expectation_failed', r.body);
      assert.match(JSON.parse(r.body).error.message, /Expect/);
      assert.equal(idOf(r.head, r.body), 'trace-expect');
      assert.match(r.head, /\r\nconnection: close/i);
    }
    // 100-continue is still met: the interim answer, then the route's own (401 here: no key).
    const cont = await raw(
      h.service.url,
      'POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nConnection: close\r\n' +
        'Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}',
    );
    assert.equal(cont.status, 100, cont.head);
    assert.match(cont.body, /^HTTP\/1\.1 401 /);
    assert.equal((await api.get('/healthz')).status, 200);
  });

  it('keeps a well-formed x-request-id, replaces any other, and echoes it on every answer', async () => {
    const ok = await api.get('/v1/sessions', { 'x-request-id': 'trace-1.2:3_A' });
    assert.equal(ok.headers.get('x-request-id'), 'trace-1.2:3_A');
    for (const bad of ['x'.repeat(8000), 'a b', 'id<script>', 'x'.repeat(129)]) {
      const r = await api.get('/v1/nowhere', { 'x-request-id': bad });
      assert.equal(r.status, 404);
      assert.match(String(r.headers.get('x-request-id')), /^req_[0-9a-f]{16}$/);
    }
    const anon = await fetch(`${h.service.url}/v1/sessions`);
    assert.equal(anon.status, 401);
    assert.match(String(anon.headers.get('x-request-id')), /^req_/);
  });

  it('refuses IPv4-compatible and IPv4-mapped IPv6 webhook targets', async () => {
    for (const a of ['::7f00:1', '::ffff:7f00:1', '::ffff:127.0.0.1', '::a9fe:a9fe', '::808:808'])
      assert.ok(refusedAddress(a), a);
    assert.equal(refusedAddress('2606:4700::1111'), null);
    for (const url of [
      'http://[::127.0.0.1]/hook',
      'http://[::ffff:127.0.0.1]/hook',
      'http://[::169.254.169.254]/',
    ]) {
      const r = await api.post('/v1/webhooks', { url });
      assert.equal(r.status, 400, url);
      assert.equal(r.body.error.code, 'invalid_webhook_url');
    }
  });

  it('completes a turn of 200,000 deltas', async () => {
    h.fake.reset();
    // textChunks: three words a delta.
    h.fake.enqueue({ ...text('ab '.repeat(600_000)), eventDelayMs: 0 });
    const s = await api.post('/v1/sessions', { input: 'Talk' });
    assert.equal(s.status, 201);
    const done = await api.waitStatus(s.body.id, ['idle', 'failed'], 90_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
  });

  it('aborts a stalled upstream stream after UPSTREAM_IDLE_MS: a retryable upstream error', async () => {
    h.fake.reset();
    h.fake.enqueue({ ...text('This reply stalls after a few events, for good.'), hangAfterEvents: 3 });
    const s = await api.post('/v1/sessions', { input: 'Hi' });
    const t0 = Date.now();
    const done = await api.waitStatus(s.body.id, ['idle', 'failed'], 20_000);
    assert.equal(done.status, 'failed');
    assert.equal(done.error.code, 'upstream_error');
    assert.equal(done.error.retryable, true);
    assert.ok(Date.now() - t0 < 15_000);
  });
});
