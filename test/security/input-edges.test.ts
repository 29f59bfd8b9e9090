/**
 * Input edges a hostile-input probe found: a prototype key anywhere in a body is a 400 `invalid_request` naming
 * it (`forbidden_key`) on every route; a body sent with a Content-Encoding (never decoded) or in another type
 * than JSON is a 415; If-Match follows RFC 9110 (`*`, lists, weak tags never match); integers in paths and query
 * strings are canonical decimal.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { startHarness, type Api, type Harness } from '../helpers/service.js';

describe('input edges', { timeout: 120_000 }, () => {
  let h: Harness;
  let api: Api;
  let sid: string;

  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-acme' } });
    api = h.api;
    const s = await api.post('/v1/sessions', { start: false });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    sid = s.body.id;
  });
  after(async () => h?.close());

  /** Every route that takes a body, with a body of its own that holds `inner` somewhere below its top. */
  const bodyRoutes = (inner: string): Array<[string, string, string]> => [
    ['POST', '/v1/sessions', `{"start":false,"metadata":{"a":1},"params":${inner}}`],
    ['POST', `/v1/sessions/{sid}/messages`, `{"content":[{"type":"text","text":"hi","x":${inner}}]}`],
    ['PATCH', `/v1/sessions/{sid}`, `{"metadata":${inner}}`],
    ['PUT', `/v1/sessions/{sid}/messages`, `{"messages":[${inner}]}`],
    ['POST', `/v1/sessions/{sid}/fork`, `{"metadata":${inner}}`],
    ['POST', '/v1/schedules', `{"cron":"* * * * *","session":${inner}}`],
    ['PUT', '/v1/tools/probe', `{"description":"d","input_schema":${inner}}`],
    ['PUT', '/v1/mcp-servers/probe', `{"url":"http://127.0.0.1:1/mcp","headers":${inner}}`],
    ['POST', '/v1/webhooks', `{"url":"http://127.0.0.1:1/h","events":["session.status"],"x":${inner}}`],
    ['POST', '/v1/client-tokens', `{"session_id":"{sid}","x":${inner}}`],
    ['POST', '/v1/chat', `{"id":"{sid}","messages":[${inner}]}`],
  ];

  const send = (method: string, path: string, body: BodyInit, headers: Record<string, string> = {}) =>
    fetch(`${api.base}${path.replace('{sid}', sid)}`, {
      method,
      headers: { authorization: 'Bearer key-acme', 'content-type': 'application/json', ...headers },
      body,
    }).then(async (r) => ({ status: r.status, body: (await r.json()) as any }));

  it('refuses a prototype key at any depth with 400 invalid_request and a forbidden_key detail, on every route', async () => {
    for (const [inner, path] of [
      ['{"__proto__":{"polluted":1}}', '/__proto__'],
      ['{"a":[{"\\u005f_proto__":1}]}', '/a/0/__proto__'],
      ['{"constructor":{"prototype":{"polluted":1}}}', '/constructor/prototype'],
    ] as const) {
      for (const [method, route, body] of bodyRoutes(inner)) {
        const r = await send(method, route, body);
        const what = `${method} ${route} ${body}`;
        assert.equal(r.status, 400, what);
        assert.equal(r.body.error.code, 'invalid_request', what);
        assert.equal(r.body.error.details[0].code, 'forbidden_key', what);
        assert.ok(r.body.error.details[0].path.endsWith(path), `${what}: ${r.body.error.details[0].path}`);
      }
    }
    // At the top too; and the words as values (or a constructor without a prototype) are data.
    const top = await send('POST', '/v1/sessions', '{"__proto__":{"start":false}}');
    assert.equal(top.status, 400);
    assert.deepEqual(top.body.error.details[0].path, '/__proto__');
    const ok = await send(
      'POST',
      '/v1/sessions',
      '{"start":false,"metadata":{"k":"__proto__","constructor":"x"}}',
    );
    assert.equal(ok.status, 201, JSON.stringify(ok.body));
    assert.deepEqual(ok.body.metadata, { k: '__proto__', constructor: 'x' });
  });

  it('refuses a body with a Content-Encoding other than identity with 415, before reading it', async () => {
    const json = JSON.stringify({ start: false });
    for (const [encoding, body] of [
      ['gzip', new Uint8Array(gzipSync(json))],
      ['br', new Uint8Array(Buffer.from(json))],
      ['deflate', new Uint8Array(Buffer.from(json))],
      ['identity, gzip', new Uint8Array(gzipSync(json))],
      ['x-unknown', new Uint8Array(Buffer.from(json))],
    ] as const) {
      const r = await send('POST', '/v1/sessions', body, { 'content-encoding': encoding });
      assert.equal(r.status, 415, `${encoding}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, 'unsupported_media_type', encoding);
    }
    const plain = await send('POST', '/v1/sessions', json, { 'content-encoding': 'identity' });
    assert.equal(plain.status, 201, JSON.stringify(plain.body));
    // A request without a body is not refused for the header.
    const get = await api.get(`/v1/sessions/${sid}`, { 'content-encoding': 'gzip' });
    assert.equal(get.status, 200);
    // No key: 401 first.
    const anon = await fetch(`${api.base}/v1/sessions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: new Uint8Array(gzipSync(json)),
    });
    assert.equal(anon.status, 401);
  });

  it('refuses a body in any type but JSON with 415 on every route that takes one', async () => {
    for (const type of [
      'text/plain',
      'text/plain; charset=utf-8',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
    ]) {
      for (const [method, route, body] of bodyRoutes('{}')) {
        const r = await send(method, route, body, { 'content-type': type });
        assert.equal(r.status, 415, `${type} ${method} ${route}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.code, 'unsupported_media_type');
      }
    }
    // A body without a content type (a Blob without a type: fetch sends none) is not JSON either.
    const untyped = await fetch(`${api.base}/v1/sessions`, {
      method: 'POST',
      headers: { authorization: 'Bearer key-acme' },
      body: new Blob(['{"start":false}']),
    });
    assert.equal(untyped.status, 415, await untyped.clone().text());
    assert.equal(
      ((await untyped.json()) as { error: { code: string } }).error.code,
      'unsupported_media_type',
    );
  });

  it('takes UTF-8 only: a body with bytes that are not UTF-8 is 400, a charset other than utf-8 is 415, nothing stored', async () => {
    const before = (await api.get('/v1/sessions?limit=100')).body.data.length;
    // "A", an 0xFF byte, a CESU-8 surrogate (ED A0 80), "Z" inside a string.
    const bad = Buffer.concat([
      Buffer.from('{"start":false,"metadata":{"x":"A'),
      Buffer.from([0xff, 0xfe, 0xed, 0xa0, 0x80]),
      Buffer.from('Z"}}'),
    ]);
    const r = await send('POST', '/v1/sessions', bad);
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.code, 'invalid_request');
    assert.equal(r.body.error.details[0].code, 'invalid_utf8');
    for (const set of ['iso-8859-1', 'bogus', '"latin1"']) {
      const latin = Buffer.from('{"start":false,"metadata":{"x":"café"}}', 'latin1');
      const t = await send('POST', '/v1/sessions', latin, {
        'content-type': `application/json; charset=${set}`,
      });
      assert.equal(t.status, 415, `${set}: ${JSON.stringify(t.body)}`);
      assert.equal(t.body.error.code, 'unsupported_media_type');
    }
    assert.equal((await api.get('/v1/sessions?limit=100')).body.data.length, before, 'nothing created');
    // UTF-8 said either way, and a BOM, are taken.
    for (const type of [
      'application/json; charset=utf-8',
      'application/json;charset="UTF-8"',
      'application/json',
    ]) {
      const ok = await send(
        'POST',
        '/v1/sessions',
        Buffer.from('\ufeff{"start":false,"metadata":{"x":"café"}}'),
        {
          'content-type': type,
        },
      );
      assert.equal(ok.status, 201, `${type}: ${JSON.stringify(ok.body)}`);
      assert.equal(ok.body.metadata.x, 'café');
    }
  });

  it('takes integers of paths and query strings in canonical decimal only (400 invalid_request otherwise)', async () => {
    const paths = (n: string) => [
      `/v1/sessions?limit=${n}`,
      `/v1/sessions/${sid}/events?limit=${n}`,
      `/v1/sessions/${sid}/iterations/${n}`,
      `/v1/schedules?limit=${n}`,
      `/v1/webhooks/wh_missing/deliveries?limit=${n}`,
    ];
    for (const n of ['01', '0b1', '0x10', '1e2', '%201', '1%20', '%2B1', '+1', '1.0', '-0', '', '١']) {
      for (const path of paths(n)) {
        const r = await api.get(path);
        assert.equal(r.status, 400, `${path}: ${r.status} ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.code, 'invalid_request', path);
      }
    }
    for (const path of paths('1').slice(0, 2)) assert.equal((await api.get(path)).status, 200, path);
    // Canonical and in range: the iteration is looked up (none yet), the defaults still apply.
    assert.equal((await api.get(`/v1/sessions/${sid}/iterations/1`)).status, 404);
    assert.equal((await api.get('/v1/sessions')).status, 200);
  });

  it('evaluates If-Match per RFC 9110: *, lists, strong comparison (a weak tag never matches)', async () => {
    const s = await api.post('/v1/sessions', { start: false });
    const id: string = s.body.id;
    let rev: number = s.body.revision;
    const patch = (ifMatch: string) =>
      api.req('PATCH', `/v1/sessions/${id}`, { metadata: { n: rev } }, { 'if-match': ifMatch });
    const ok = async (ifMatch: string) => {
      const r = await patch(ifMatch);
      assert.equal(r.status, 200, `${ifMatch}: ${JSON.stringify(r.body)}`);
      assert.equal(r.headers.get('etag'), `"${rev + 1}"`);
      rev = r.body.revision;
    };
    const refused = async (ifMatch: string) => {
      const r = await patch(ifMatch);
      assert.equal(r.status, 412, `${ifMatch}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, 'revision_mismatch');
      assert.equal(r.body.error.details.revision, rev);
    };
    await ok('*');
    await ok(`"${rev}"`);
    await ok(`"${rev + 5}", "${rev}"`);
    await ok(`W/"${rev + 5}",  "${rev}" ,"x"`);
    await refused(`W/"${rev}"`);
    await refused(`W/"${rev}", W/"${rev + 1}"`);
    await refused(`"${rev + 1}", "${rev + 2}"`);
    await refused(`"0${rev}"`);
    await refused('"abc"');
    for (const bad of [
      Array.from({ length: 17 }, (_, i) => `"${i}"`).join(', '),
      '"1" "2"',
      '* , "1"',
      'W/1',
      '"a""',
    ]) {
      const r = await patch(bad);
      assert.equal(r.status, 400, `${bad}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, 'invalid_request');
    }
    await ok(Array.from({ length: 16 }, (_, i) => `"${rev + 15 - i}"`).join(', '));
    // `*` needs a resource: a PUT with it does not create one; a DELETE of none is refused too.
    const tool = { description: 'd', input_schema: { type: 'object' }, runner: { type: 'worker' } };
    const put = await api.req('PUT', '/v1/tools/edge_tool', tool, { 'if-match': '*' });
    assert.equal(put.status, 412, JSON.stringify(put.body));
    assert.equal((await api.req('PUT', '/v1/tools/edge_tool', tool)).status, 201);
    assert.equal((await api.req('PUT', '/v1/tools/edge_tool', tool, { 'if-match': '*' })).status, 200);
    assert.equal(
      (await api.req('DELETE', '/v1/tools/edge_tool', undefined, { 'if-match': 'W/"2"' })).status,
      412,
    );
    assert.equal(
      (await api.req('DELETE', '/v1/tools/edge_tool', undefined, { 'if-match': '"1", "2"' })).status,
      200,
    );
  });
});
