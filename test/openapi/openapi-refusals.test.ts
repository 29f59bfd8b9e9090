/**
 * Every operation of openapi.json under /v1 is driven into the refusals it declares that a request can reach
 * without setting up state (no key: 401; an unknown id: 404 or, for an id of the wrong shape, 400; a body that is
 * not JSON: 400; a body of another media type: 415; a session in a state the route does not fit: 409; a body over
 * the limit: 413; the tenant's rate limit: 429), and each answer is checked: its status is one the operation
 * declares, and its body validates (ajv) against the schema declared for that status (the `Error` envelope, whose
 * `code` is the closed enum of src/errors.ts). test/openapi/openapi-statuses.test.ts drives the refusals that need state.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { OPENAPI_JSON } from '../helpers/openapi.js';
import { startHarness, type Harness } from '../helpers/service.js';

type Responses = Record<string, { content?: Record<string, { schema: unknown }> }>;
type Op = { method: string; path: string; responses: Responses; hasBody: boolean };
type Doc = { paths: Record<string, Record<string, { responses: Responses; requestBody?: unknown }>> };

const doc = JSON.parse(readFileSync(OPENAPI_JSON, 'utf8')) as Doc;
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(doc, 'openapi.json');

const ops: Op[] = Object.entries(doc.paths)
  .filter(([p]) => p.startsWith('/v1/'))
  .flatMap(([path, byMethod]) =>
    Object.entries(byMethod)
      .filter(([m]) => ['get', 'post', 'put', 'patch', 'delete'].includes(m))
      .map(([m, o]) => ({ method: m.toUpperCase(), path, responses: o.responses, hasBody: !!o.requestBody })),
  );

/** The path with its parameters filled: ids of the right shape that name nothing. */
const fill = (p: string) =>
  p.replace(/\{(\w+)\}/g, (_m, name: string) =>
    name === 'n'
      ? '99'
      : name === 'path'
        ? 'nothing.txt'
        : name === 'id' && p.startsWith('/v1/sessions')
          ? 'ses_nothingHere000'
          : 'nothing_here',
  );

describe('every operation answers its refusals with a declared status and the declared error body', () => {
  let h: Harness;
  const KEY = 'k-refusals';
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, RATE_LIMIT_PER_MIN: '100000' } });
  });
  after(async () => h.close());

  async function drive(op: Op, path: string, init: { body?: string; type?: string; key?: boolean }) {
    const res = await fetch(h.service.url + path, {
      method: op.method,
      headers: {
        ...(init.key === false ? {} : { authorization: `Bearer ${KEY}` }),
        ...(init.type ? { 'content-type': init.type } : {}),
      },
      ...(init.body !== undefined ? { body: init.body } : {}),
    });
    const text = await res.text();
    const label = `${op.method} ${op.path} → ${res.status} ${text.slice(0, 300)}`;
    const declared = op.responses[String(res.status)];
    assert.ok(declared, `${label}: status not declared (declares ${Object.keys(op.responses).join(', ')})`);
    const schema = declared.content?.['application/json']?.schema;
    if (res.status >= 400) {
      const ref = (schema as { $ref?: string } | undefined)?.$ref;
      assert.ok(ref?.startsWith('#/'), `${label}: no JSON body schema declared`);
      const validate = ajv.getSchema(`openapi.json${ref}`)!;
      assert.ok(validate(JSON.parse(text)), `${label}: ${JSON.stringify(validate.errors)}`);
    }
    return res.status;
  }

  test('no key: 401 on every operation', async () => {
    for (const op of ops) {
      if (!op.responses['401']) continue;
      assert.equal(await drive(op, fill(op.path), { key: false }), 401, `${op.method} ${op.path}`);
    }
  });

  test('an unknown id: 404 (or 400 for an id of the wrong shape) on every operation with one', async () => {
    for (const op of ops) {
      if (!op.responses['404'] || op.hasBody || !op.path.includes('{')) continue;
      const status = await drive(op, fill(op.path), {});
      // The WebSocket route answers a plain GET 426 before it looks the session up.
      const want = op.path.endsWith('/stream') && op.responses['426'] ? [426] : [400, 404];
      assert.ok(want.includes(status), `${op.method} ${op.path}: ${status}`);
    }
  });

  test('409 where a state makes it reachable: a session that is not running, with nothing pending', async () => {
    const s = await h.api.post('/v1/sessions', { input: 'hi', start: false });
    assert.equal(s.status, 201, JSON.stringify(s.body));
    const id = s.body.id as string;
    const paths = ['cancel', 'continue', 'resume', 'retry', 'compact'];
    for (const op of ops.filter((o) => paths.some((p) => o.path === `/v1/sessions/{id}/${p}`))) {
      const status = await drive(op, op.path.replace('{id}', id), { body: '{}', type: 'application/json' });
      assert.ok(status === 409 || status < 300, `${op.method} ${op.path}: ${status}`);
    }
    const put = ops.find((o) => o.method === 'PUT' && o.path.endsWith('/tool-results/{tool_use_id}'))!;
    const path = put.path.replace('{id}', id).replace('{tool_use_id}', 'toolu_x');
    assert.equal(await drive(put, path, { body: '{"content":"x"}', type: 'application/json' }), 409);
  });

  test('413: a body over the limit, on the routes that take the largest bodies', async () => {
    const big = JSON.stringify({ input: 'x'.repeat(12 << 20) });
    for (const op of ops.filter((o) => o.hasBody && o.responses['413']).slice(0, 3)) {
      assert.equal(await drive(op, fill(op.path), { body: big, type: 'application/json' }), 413, op.path);
    }
  });

  test('429: the tenant rate limit, declared where answered', async () => {
    const limited = await startHarness({ env: { API_KEYS: `acme:${KEY}`, RATE_LIMIT_PER_MIN: '2' } });
    try {
      const op = ops.find((o) => o.method === 'POST' && o.path === '/v1/sessions')!;
      const body = JSON.stringify({ input: 'hi', start: false });
      let status = 0;
      for (let i = 0; i < 10 && status !== 429; i++) {
        const res = await fetch(`${limited.service.url}/v1/sessions`, {
          method: 'POST',
          headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
          body,
        });
        status = res.status;
        if (status === 429) {
          assert.ok(op.responses['429']);
          const validate = ajv.getSchema('openapi.json#/components/schemas/Error')!;
          assert.ok(validate(await res.json()), JSON.stringify(validate.errors));
          assert.ok(res.headers.get('retry-after'));
        } else await res.arrayBuffer();
      }
      assert.equal(status, 429);
    } finally {
      await limited.close();
    }
  });

  test('a body that is not JSON: 400; another media type: 415 (a route that takes no body parses one too)', async () => {
    for (const op of ops) {
      if (op.method === 'GET') continue;
      if (op.responses['400']) {
        assert.equal(await drive(op, fill(op.path), { body: '{"a":', type: 'application/json' }), 400);
      }
      if (op.responses['415']) {
        const status = await drive(op, fill(op.path), { body: '<a/>', type: 'application/xml' });
        assert.equal(status, 415, `${op.method} ${op.path}`);
      }
    }
  });
});
