import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startHarness, type Harness } from '../helpers/service.js';

/**
 * The WebSocket upgrade itself, fuzzed over raw sockets (issue 22): keys, versions, subprotocol lists, Origin
 * spellings, upgrades on every other route, HTTP/1.0, oversized headers, and a raw client sending broken frames
 * after a good handshake. Never a 5xx and never a crash; a refused upgrade is an HTTP 4xx in the error envelope; the
 * good handshakes still open (101). Each case's answer is read from the socket as bytes, as a client would.
 */

const KEY = 'key-acme';
const ORIGIN = 'https://app.example';
const GOOD_KEY = 'dGhlIHNhbXBsZSBub25jZQ==';

interface Answer {
  status: number;
  head: string;
  body: string;
}

/** Sends raw bytes; resolves with the first answer (status 0: the socket closed with none) once it is whole. */
function raw(port: number, bytes: string | Buffer): Promise<Answer> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      const text = buf.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      const head = end >= 0 ? text.slice(0, end) : text;
      resolve({
        status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(head)?.[1] ?? 0),
        head,
        body: end >= 0 ? text.slice(end + 4) : '',
      });
    };
    // A handshake that never answers is a failure of its own (status 0 and this head).
    const timer = setTimeout(() => {
      buf = Buffer.from('(no answer within 10 s)');
      finish();
    }, 10_000);
    socket.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const text = buf.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end < 0) return;
      if (/^HTTP\/1\.1 101/.test(text)) return finish();
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(text.slice(0, end))?.[1] ?? NaN);
      if (Number.isFinite(length) && Buffer.byteLength(text.slice(end + 4), 'latin1') >= length) finish();
    });
    socket.on('close', finish);
    socket.on('error', () => {});
    socket.write(bytes);
  });
}

/** An upgrade request: `headers` over the good ones (a null drops one; an array repeats it). */
function upgrade(
  target: string,
  headers: Record<string, string | string[] | null> = {},
  { method = 'GET', version = '1.1' } = {},
): string {
  const all: Record<string, string | string[] | null> = {
    host: '127.0.0.1',
    connection: 'Upgrade',
    upgrade: 'websocket',
    'sec-websocket-key': GOOD_KEY,
    'sec-websocket-version': '13',
    authorization: `Bearer ${KEY}`,
    ...headers,
  };
  const lines = Object.entries(all).flatMap(([k, v]) =>
    v === null ? [] : (Array.isArray(v) ? v : [v]).map((x) => `${k}: ${x}`),
  );
  return `${method} ${target} HTTP/${version}\r\n${lines.join('\r\n')}\r\n\r\n`;
}

describe('the WebSocket upgrade, fuzzed', () => {
  let h: Harness;
  let port: number;
  let stream = '';
  let clientToken = '';

  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, CORS_ORIGINS: ORIGIN } });
    port = Number(new URL(h.service.url).port);
    const api = h.api.as(KEY);
    const s = await api.post('/v1/sessions', { start: false });
    assert.equal(s.status, 201);
    stream = `/v1/sessions/${s.body.id}/stream`;
    const t = await api.post('/v1/client-tokens', { session_id: s.body.id, scopes: ['read'] });
    assert.equal(t.status, 201, JSON.stringify(t.body));
    clientToken = t.body.token;
  });
  after(async () => h?.close());

  /** Asserts a refusal: the status expected, and a body in the one error envelope. */
  const refused = (a: Answer, status: number, label: string) => {
    assert.equal(a.status, status, `${label}: ${a.head.split('\r\n')[0]} ${a.body.slice(0, 200)}`);
    let body: { error?: { code?: unknown; message?: unknown } } = {};
    try {
      body = JSON.parse(a.body) as typeof body;
    } catch {
      assert.fail(`${label}: not JSON: ${a.head.split('\r\n')[0]} ${a.body.slice(0, 200)}`);
    }
    assert.equal(typeof body.error?.code, 'string', `${label}: not in the envelope: ${a.body.slice(0, 200)}`);
    assert.equal(typeof body.error?.message, 'string', label);
  };

  it('opens on the good handshakes: a key header, `bearer, <key>`, a client token, a listed Origin', async () => {
    const good: Array<Record<string, string | null>> = [
      {},
      { authorization: null, 'sec-websocket-protocol': `bearer, ${KEY}` },
      { authorization: null, 'sec-websocket-protocol': `bearer, ${clientToken}` },
      { origin: ORIGIN },
      { upgrade: 'WebSocket', connection: 'keep-alive, Upgrade' },
      { 'sec-websocket-version': '8' },
    ];
    for (const headers of good) {
      const a = await raw(port, upgrade(stream, headers));
      assert.equal(a.status, 101, `${JSON.stringify(headers)}: ${a.head.split('\r\n')[0]} ${a.body}`);
    }
  });

  it('refuses a bad Sec-WebSocket-Key or -Version with 400 in the envelope', async () => {
    const cases: Array<[string, Record<string, string | string[] | null>]> = [
      ['no key', { 'sec-websocket-key': null }],
      ['empty key', { 'sec-websocket-key': '' }],
      ['key not base64', { 'sec-websocket-key': '!!!!!!!!!!!!!!!!!!!!!!==' }],
      ['key of 4 bytes', { 'sec-websocket-key': 'AAAAAA==' }],
      ['key of 32 bytes', { 'sec-websocket-key': Buffer.alloc(32, 1).toString('base64') }],
      ['key twice', { 'sec-websocket-key': [GOOD_KEY, GOOD_KEY] }],
      ['key of 8 kB', { 'sec-websocket-key': 'A'.repeat(8192) }],
      ['no version', { 'sec-websocket-version': null }],
      ...['12', '14', '0', '-13', '13.0', 'abc', '13, 13', ' '].map((v): [string, Record<string, string>] => [
        `version "${v}"`,
        { 'sec-websocket-version': v },
      ]),
      ['version twice', { 'sec-websocket-version': ['13', '13'] }],
    ];
    for (const [label, headers] of cases) refused(await raw(port, upgrade(stream, headers)), 400, label);
    const a = await raw(port, upgrade(stream, { 'sec-websocket-version': '14' }));
    assert.match(a.head, /\r\nsec-websocket-version: 13/i, 'a refused version names the one spoken');
  });

  it('refuses malformed or huge subprotocol lists (400) and junk keys in them (401), in the envelope', async () => {
    const malformed = [
      ', , ,',
      `bearer,,${KEY}`,
      'bearer, a b',
      'bearer, "quoted"',
      'bearer, bearer',
      Array.from({ length: 1000 }, (_, i) => `p${i}`).join(', '),
      `bearer, ${'x'.repeat(12_000)}, y, y`,
      'bearer, caf\u00e9',
      'bearer, ',
    ];
    // With a good key header, so the answer is about the list (without one, the key check answers 401 first).
    for (const p of malformed)
      refused(
        await raw(port, upgrade(stream, { 'sec-websocket-protocol': p })),
        400,
        `protocols ${p.slice(0, 40)}`,
      );
    const junk = [
      'bearer',
      `bearer, ${clientToken}x`,
      `bearer, ${clientToken.slice(0, -1)}`,
      'bearer, ct_',
      `bearer, ${'x'.repeat(5000)}`,
      `x, bearer, ${KEY}x`,
    ];
    for (const p of junk)
      refused(
        await raw(port, upgrade(stream, { authorization: null, 'sec-websocket-protocol': p })),
        401,
        `protocols ${p.slice(0, 40)}`,
      );
  });

  it('refuses foreign Origin spellings with 403 in the envelope', async () => {
    const origins = [
      'null',
      'https://evil.example',
      'HTTPS://APP.EXAMPLE',
      `${ORIGIN}/`,
      `${ORIGIN}.evil.example`,
      `${ORIGIN}:443`,
      'http://app.example',
      `https://x@app.example`,
      `http://127.0.0.1:${port}.evil.example`,
      '',
    ];
    for (const origin of origins)
      refused(await raw(port, upgrade(stream, { origin })), 403, `origin ${JSON.stringify(origin)}`);
  });

  it('answers an upgrade on every other route with a 4xx in the envelope, never a handshake', async () => {
    const id = stream.split('/')[3]!;
    const targets = [
      '/healthz',
      '/readyz',
      '/metrics',
      '/docs',
      '/docs/json',
      '/docs/static/index.css',
      '/console/',
      '/nowhere',
      '/v1/sessions',
      `/v1/sessions/${id}`,
      `/v1/sessions/${id}/events`,
      `/v1/sessions/${id}/messages`,
      '/v1/tools',
      '/v1/webhooks',
      '/v1/nowhere',
      `/v1/sessions/${id}/stream/x`,
      `/v1/sessions/ses_AAAAAAAAAAAAAAAA/streamx`,
    ];
    for (const t of targets) {
      for (const auth of [`Bearer ${KEY}`, null]) {
        const a = await raw(port, upgrade(t, { authorization: auth }));
        assert.ok(
          a.status >= 400 && a.status < 500,
          `${t} (key: ${auth !== null}): ${a.head.split('\r\n')[0]}`,
        );
        refused(a, a.status, `${t} (key: ${auth !== null})`);
      }
    }
    // An unknown /v1 path with a key: the catch-all's 404, answered before the handshake is looked at.
    const unknown = await raw(port, upgrade('/v1/nowhere', { authorization: `Bearer ${KEY}` }));
    refused(unknown, 404, 'an unknown /v1 path');
    assert.match(unknown.body, /"route_not_found"/);
    for (const method of ['POST', 'PUT', 'DELETE', 'OPTIONS', 'HEAD']) {
      const a = await raw(port, upgrade(stream, {}, { method }));
      assert.ok(a.status >= 400 && a.status < 500, `${method} upgrade: ${a.head.split('\r\n')[0]}`);
      if (method !== 'HEAD') refused(a, a.status, `${method} upgrade`);
    }
  });

  it('never answers 5xx to HTTP/1.0, odd Upgrade values, oversized headers or broken request lines', async () => {
    const cases: Array<[string, string | Buffer]> = [
      ['HTTP/1.0 upgrade', upgrade(stream, {}, { version: '1.0' })],
      ['Upgrade: h2c', upgrade(stream, { upgrade: 'h2c' })],
      ['Upgrade: websocket, h2c', upgrade(stream, { upgrade: 'websocket, h2c' })],
      ['Upgrade twice', upgrade(stream, { upgrade: ['websocket', 'websocket'] })],
      ['Upgrade without Connection', upgrade(stream, { connection: null })],
      ['32 kB header', upgrade(stream, { 'x-big': 'x'.repeat(32_768) })],
      [
        '1,000 headers',
        upgrade(stream, Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`x-${i}`, 'y']))),
      ],
      ['NUL in a header', upgrade(stream, { 'x-nul': 'a\u0000b' })],
      ['bare LF line ends', upgrade(stream).replaceAll('\r\n', '\n')],
      ['no Host', upgrade(stream, { host: null })],
      ['garbage', Buffer.from([0x16, 0x03, 0x01, 0x00, 0xff, 0x01, 0x00, 0x00, 0x0d, 0x0a, 0x0d, 0x0a])],
    ];
    for (const [label, bytes] of cases) {
      const a = await raw(port, bytes);
      assert.ok(a.status < 500, `${label}: ${a.head.split('\r\n')[0]}`);
      if (a.status >= 400 && a.body.startsWith('{')) refused(a, a.status, label);
    }
  });

  it('closes a raw client that sends broken frames after a good handshake; the service stays healthy', async () => {
    // Client frames must be masked (RFC 6455 §5.1); these are not, or use reserved bits/opcodes, or announce a
    // payload far over the 1 MiB cap, or are a control frame over 125 bytes.
    const frames = [
      Buffer.from([0x81, 0x05, ...Buffer.from('hello')]),
      Buffer.from([0xf1, 0x80, 0, 0, 0, 0]),
      Buffer.from([0x83, 0x80, 0, 0, 0, 0]),
      Buffer.from([0x82, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]),
      Buffer.from([0x89, 0xfe, 0x01, 0x00, 0, 0, 0, 0]),
      Buffer.from([0x00, 0x80, 0, 0, 0, 0]),
    ];
    for (const frame of frames) {
      const closed = await new Promise<boolean>((resolve) => {
        const socket = net.connect(port, '127.0.0.1');
        let opened = false;
        const timer = setTimeout(() => resolve(false), 10_000);
        socket.on('data', (d) => {
          if (!opened && /^HTTP\/1\.1 101/.test(d.toString('latin1'))) {
            opened = true;
            socket.write(frame);
          }
        });
        socket.on('close', () => {
          clearTimeout(timer);
          resolve(opened);
        });
        socket.on('error', () => {});
        socket.write(upgrade(stream));
      });
      assert.ok(closed, `frame ${frame.toString('hex').slice(0, 24)}: not opened, or not closed`);
    }
    assert.equal((await h.api.get('/healthz')).status, 200);
    assert.equal((await h.api.get('/readyz')).status, 200);
  });
});
