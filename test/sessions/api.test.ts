import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { text } from '../fake/script.js';

describe('API surface', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { RATE_LIMIT_PER_MIN: '5', API_KEYS: 'acme:k1,other:k2' } });
    h.fake.setHandler(() => text('ok'));
  });
  after(async () => h.close());

  it('serves the OpenAPI document with every session route', async () => {
    const r = await h.api.get('/docs/json');
    assert.equal(r.status, 200);
    for (const path of ['/v1/sessions', '/v1/sessions/{id}/tool-calls/{tool_use_id}', '/v1/tools']) {
      assert.ok(r.body.paths[path], path);
    }
  });

  it('exposes Prometheus metrics and lists the server tools with schemas', async () => {
    const m = await h.api.get('/metrics');
    assert.equal(m.status, 200);
    assert.match(String(m.body), /trs_active_runs \d+/);
    const t = await h.api.get('/v1/tools');
    const weather = t.body.data.find((x: any) => x.name === 'get_weather');
    assert.equal(weather.input_schema.type, 'object');
    assert.ok(weather.input_schema.properties.location);
  });

  it('answers a malformed JSON body with 400 invalid_json and a wrong type with 400 invalid_request', async () => {
    const a = await h.api.post('/v1/sessions', '{nope');
    assert.equal(a.status, 400);
    assert.equal(a.body.error.code, 'invalid_json');
    const b = await h.api.post('/v1/sessions', { input: 5 });
    assert.equal(b.status, 400);
    assert.equal(b.body.error.code, 'invalid_request');
    assert.equal(b.body.error.details[0].path, '/input');
  });

  it('limits mutating requests per tenant per minute with 429 rate_limited and Retry-After', async () => {
    const other = h.api.as('k2');
    const codes: number[] = [];
    for (let i = 0; i < 7; i++)
      codes.push((await other.post('/v1/sessions', { input: 'x', start: false })).status);
    assert.deepEqual(codes.slice(0, 5), [201, 201, 201, 201, 201]);
    const r = await other.post('/v1/sessions', { input: 'x', start: false });
    assert.equal(r.status, 429);
    assert.equal(r.body.error.code, 'rate_limited');
    assert.ok(Number(r.headers.get('retry-after')) > 0);
    // another tenant is not affected, and reads are not limited
    assert.equal((await h.api.as('k1').post('/v1/sessions', { input: 'y', start: false })).status, 201);
    assert.equal((await other.get('/v1/sessions')).status, 200);
  });
});
