/**
 * The console's HTTP side without a browser: its page, CSP and assets, `/demo`'s redirect, `CORS_ORIGINS` (parsing,
 * preflights without a key, headers only for listed origins) and the WebSocket Origin check (403 when the list is
 * set and the origin is neither listed nor the service's own; any origin when unset). test/console/browser.test.ts drives
 * the page itself in Chromium.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';
import WebSocket from 'ws';
import { loadConfig, ConfigError } from '../../src/config.js';
import { startHarness, type Harness } from '../helpers/service.js';

const KEY = 'console-key-1';
const LISTED = 'https://console.example.com';

/** Status of a WebSocket upgrade with this Origin (101 when it opens). */
function upgrade(url: string, origin: string | undefined): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, ['bearer', KEY], origin ? { origin } : {});
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

describe('CORS_ORIGINS parsing', () => {
  it('takes comma-separated origins and refuses anything that is not one', () => {
    assert.deepEqual(loadConfig({ CORS_ORIGINS: 'https://a.example, http://127.0.0.1:8080/' }).CORS_ORIGINS, [
      'https://a.example',
      'http://127.0.0.1:8080',
    ]);
    for (const bad of ['*', 'a.example', 'https://a.example/path', 'ftp://a.example']) {
      assert.throws(
        () => loadConfig({ CORS_ORIGINS: bad }),
        (err: unknown) => {
          assert.ok(err instanceof ConfigError);
          assert.match(err.message, /CORS_ORIGINS/);
          return true;
        },
      );
    }
  });
});

describe('console over HTTP', () => {
  let h: Harness;
  let open: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, CORS_ORIGINS: LISTED } });
    open = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(async () => {
    await h?.close();
    await open?.close();
  });

  it('serves the page with a CSP that allows its own assets and its import map only', async () => {
    const res = await fetch(`${h.service.url}/console`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type')!, /^text\/html/);
    const html = await res.text();
    const csp = res.headers.get('content-security-policy')!;
    const importMap = /<script type="importmap">([\s\S]*?)<\/script>/.exec(html)![1]!;
    const hash = createHash('sha256').update(importMap).digest('base64');
    assert.match(csp, /default-src 'none'/);
    assert.ok(csp.includes(`script-src 'self' 'sha256-${hash}'`), csp);
    assert.match(csp, /connect-src 'self'/);
    assert.match(csp, /frame-ancestors 'none'/);
    for (const path of JSON.parse(importMap).imports
      ? Object.values<string>(JSON.parse(importMap).imports)
      : []) {
      const asset = await fetch(`${h.service.url}${path}`);
      assert.equal(asset.status, 200, path);
      assert.match(asset.headers.get('content-type')!, /^text\/javascript/);
    }
    const app = await fetch(`${h.service.url}/console/app.js`);
    assert.equal(app.status, 200);
    const etag = app.headers.get('etag')!;
    assert.equal(
      (await fetch(`${h.service.url}/console/app.js`, { headers: { 'if-none-match': etag } })).status,
      304,
    );
    assert.equal(
      (await fetch(`${h.service.url}/console/favicon.svg`)).headers.get('content-type'),
      'image/svg+xml',
    );
    assert.equal((await fetch(`${h.service.url}/favicon.ico`)).status, 200);
    // Only the page's files: nothing else of the directory or of node_modules.
    for (const path of [
      '/console/index.html',
      '/console/..%2F..%2Fpackage.json',
      '/console/vendor/compat.mjs',
    ]) {
      assert.equal((await fetch(`${h.service.url}${path}`)).status, 404, path);
    }
  });

  it('/demo redirects to /console', async () => {
    const res = await fetch(`${h.service.url}/demo`, { redirect: 'manual' });
    assert.equal(res.status, 302);
    assert.equal(res.headers.get('location'), '/console');
  });

  it('answers preflights without a key, with CORS headers for listed origins only', async () => {
    const pre = await fetch(`${h.service.url}/v1/sessions/ses_0123456789abcdef/tool-calls/toolu_1`, {
      method: 'OPTIONS',
      headers: {
        origin: LISTED,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, idempotency-key, if-match',
      },
    });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), LISTED);
    assert.match(pre.headers.get('access-control-allow-methods')!, /PATCH/);
    assert.match(pre.headers.get('access-control-allow-headers')!, /idempotency-key/);

    const get = await h.api.get('/v1/sessions', { origin: LISTED });
    assert.equal(get.status, 200);
    assert.equal(get.headers.get('access-control-allow-origin'), LISTED);
    assert.match(get.headers.get('access-control-expose-headers')!, /etag/);
    // Without a key the answer is still 401, now readable by the listed page.
    const anon = await fetch(`${h.service.url}/v1/sessions`, { headers: { origin: LISTED } });
    assert.equal(anon.status, 401);
    assert.equal(anon.headers.get('access-control-allow-origin'), LISTED);

    const foreign = await h.api.get('/v1/sessions', { origin: 'https://evil.example' });
    assert.equal(foreign.headers.get('access-control-allow-origin'), null);
    // Without CORS_ORIGINS: no CORS at all, and a preflight is just an unauthenticated request.
    const none = await open.api.get('/v1/sessions', { origin: LISTED });
    assert.equal(none.headers.get('access-control-allow-origin'), null);
  });

  it('refuses WebSocket upgrades from unlisted origins with 403, before the key', async () => {
    const s = await h.api.post('/v1/sessions', { input: 'Hi', start: false });
    const url = `${h.service.url.replace('http', 'ws')}/v1/sessions/${s.body.id}/stream`;
    assert.equal(await upgrade(url, 'https://evil.example'), 403);
    assert.equal(await upgrade(url, LISTED), 101);
    assert.equal(await upgrade(url, h.service.url), 101, "the service's own pages (the console)");
    assert.equal(await upgrade(url, undefined), 101, 'servers send no Origin');
    const body = await new Promise<string>((resolve, reject) => {
      const req = http.get(url.replace('ws', 'http'), {
        headers: {
          origin: 'https://evil.example',
          connection: 'Upgrade',
          upgrade: 'websocket',
          'sec-websocket-version': '13',
          'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
        },
      });
      req.on('response', (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve(text));
      });
      req.on('upgrade', () => reject(new Error('upgraded')));
      req.on('error', reject);
    });
    assert.equal(JSON.parse(body).error.code, 'origin_not_allowed');

    const o = await open.api.post('/v1/sessions', { input: 'Hi', start: false });
    const openUrl = `${open.service.url.replace('http', 'ws')}/v1/sessions/${o.body.id}/stream`;
    assert.equal(await upgrade(openUrl, 'https://evil.example'), 101, 'no list: any origin');
  });
});
