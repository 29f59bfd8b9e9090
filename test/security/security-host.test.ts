/**
 * Issue 22 items 6 and 7 (CORS): DNS rebinding. Without API_KEYS only loopback Host values are answered (421
 * `host_not_allowed`); with keys and CORS_ORIGINS, a WebSocket's Origin passes when listed, or when it is the
 * service's own loopback origin — never because it matches an arbitrary Host. Preflights of unlisted origins get
 * no CORS headers.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { WebSocket } from 'ws';
import { startHarness, type Harness } from '../helpers/service.js';

function request(
  base: string,
  opts: { method?: string; path: string; headers: Record<string, string>; body?: string },
): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        method: opts.method ?? 'GET',
        path: opts.path,
        headers: opts.headers,
      },
      (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

/** Sends `request` as it is (a request `http` would not make: no Host) and reads the answer to the close. */
function raw(base: string, request: string): Promise<{ status: number; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const s = net.connect(Number(u.port), u.hostname);
    let data = '';
    s.on('data', (c) => (data += c));
    s.on('close', () =>
      resolve({ status: Number(data.slice(9, 12)), body: data.slice(data.indexOf('\r\n\r\n') + 4) }),
    );
    s.on('error', reject);
    s.write(request);
  });
}

function upgrade(url: string, origin: string, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ['bearer', 'key-acme'], { origin, headers: { host } });
    ws.on('open', () => {
      ws.close();
      resolve(101);
    });
    ws.on('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      ws.terminate();
    });
    ws.on('error', (err) => {
      if (!/Unexpected server response/.test(String(err))) reject(err);
    });
  });
}

describe('Host and Origin', { timeout: 60_000 }, () => {
  let open: Harness;
  let keyed: Harness;
  const LISTED = 'https://app.example';

  before(async () => {
    open = await startHarness();
    keyed = await startHarness({ env: { API_KEYS: 'acme:key-acme', CORS_ORIGINS: LISTED } });
  });
  after(async () => {
    await open?.close();
    await keyed?.close();
  });

  it('open mode answers only loopback Host values', async () => {
    const port = new URL(open.service.url).port;
    for (const host of [
      'rebind.attacker.example',
      `rebind.attacker.example:${port}`,
      '10.0.0.1',
      '[::2]',
      '127.0.0.1.nip.io',
    ]) {
      for (const [method, path] of [
        ['GET', '/v1/sessions'],
        ['POST', '/v1/sessions'],
        ['GET', '/healthz'],
        ['GET', '/console/'],
      ] as const) {
        const r = await request(open.service.url, {
          method,
          path,
          headers: { host, origin: `http://${host}`, 'content-type': 'application/json' },
          ...(method === 'POST' ? { body: '{"start":false}' } : {}),
        });
        assert.equal(r.status, 421, `${host} ${method} ${path}`);
        assert.equal(JSON.parse(r.body).error.code, 'host_not_allowed');
      }
    }
    for (const host of [
      'localhost',
      `localhost:${port}`,
      `127.0.0.1:${port}`,
      '127.1.2.3',
      `[::1]:${port}`,
      'LOCALHOST',
    ]) {
      const r = await request(open.service.url, { path: '/v1/sessions', headers: { host } });
      assert.equal(r.status, 200, host);
    }
  });

  it('open mode answers an HTTP/1.1 request without Host 400, as with keys; HTTP/1.0 without Host 421', async () => {
    const noHost = await raw(open.service.url, 'GET /v1/sessions HTTP/1.1\r\nConnection: close\r\n\r\n');
    assert.equal(noHost.status, 400, noHost.body);
    assert.equal(JSON.parse(noHost.body).error.code, 'invalid_request');
    // HTTP/1.0 may leave Host out, but open mode answers only a loopback one.
    const old = await raw(open.service.url, 'GET /v1/sessions HTTP/1.0\r\n\r\n');
    assert.equal(old.status, 421, old.body);
    assert.equal(JSON.parse(old.body).error.code, 'host_not_allowed');
  });

  it('with keys, a WebSocket Origin matching a foreign Host is refused; listed and own loopback pass', async () => {
    const s = await keyed.api.post('/v1/sessions', { start: false });
    const path = `/v1/sessions/${s.body.id}/stream`;
    const port = new URL(keyed.service.url).port;
    const url = `${keyed.service.url.replace('http', 'ws')}${path}`;
    const rebound = await upgrade(
      url,
      `http://rebind.attacker.example:${port}`,
      `rebind.attacker.example:${port}`,
    );
    assert.equal(rebound, 403);
    for (const origin of [LISTED, keyed.service.url])
      assert.equal(await upgrade(url, origin, `127.0.0.1:${port}`), 101);
    // The service's own origin by a loopback name passes; by any other name it does not.
    assert.equal(await upgrade(url, `http://localhost:${port}`, `localhost:${port}`), 101);
  });

  it('gives a preflight of an unlisted origin no CORS headers', async () => {
    const pre = (origin: string) =>
      request(keyed.service.url, {
        method: 'OPTIONS',
        path: '/v1/sessions',
        headers: {
          host: new URL(keyed.service.url).host,
          origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization, content-type',
        },
      });
    const foreign = await pre('https://evil.example');
    assert.deepEqual(
      Object.keys(foreign.headers).filter((k) => k.startsWith('access-control-')),
      [],
      JSON.stringify(foreign.headers),
    );
    const listed = await pre(LISTED);
    assert.equal(listed.headers['access-control-allow-origin'], LISTED);
    assert.match(String(listed.headers['access-control-allow-methods']), /PATCH/);
    // An OPTIONS that is no preflight: 400 in the envelope, with the answer's request id.
    const bare = await request(keyed.service.url, {
      method: 'OPTIONS',
      path: '/v1/sessions',
      headers: { host: new URL(keyed.service.url).host },
    });
    assert.equal(bare.status, 400);
    const body = JSON.parse(bare.body);
    assert.equal(body.error.code, 'invalid_request');
    assert.equal(body.error.request_id, bare.headers['x-request-id']);
  });
});
