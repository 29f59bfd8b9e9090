/**
 * Each route's error responses say which `error.code` values it answers per status (an `enum`), and that stays
 * true: the enum of every status holds only codes the error handler answers with that status (ERROR_STATUS); the
 * refusals driven here (and in openapi-refusals / openapi-statuses, which validate bodies against the declared
 * schema) carry a code of their route's enum; and a route answering a code its schema does not list is caught by
 * the response check (a 500 in tests), so the document cannot drift from what is answered.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import Fastify from 'fastify';
import { validatorCompiler } from 'fastify-type-provider-zod';
import { ERROR_CODES, NotFound, type ErrorCode } from '../../src/errors.js';
import { ERROR_STATUS, answersWith } from '../../src/plugins/error-status.js';
import errorsPlugin from '../../src/plugins/errors.js';
import { checkedSerializer } from '../../src/openapi/serializer.js';
import { codesOfStatus, routeErrors } from '../../src/openapi/responses.js';
import { OPENAPI_JSON } from '../helpers/openapi.js';
import { startHarness, type Harness } from '../helpers/service.js';

type Schema = { $ref?: string; allOf?: Schema[]; properties?: Record<string, Schema>; enum?: string[] };
type Responses = Record<string, { content?: Record<string, { schema: Schema }> }>;
type Doc = {
  paths: Record<string, Record<string, { responses: Responses }>>;
  components: { schemas: Record<string, Schema> };
};

const doc = JSON.parse(readFileSync(OPENAPI_JSON, 'utf8')) as Doc;

/** The `error.code` enum the document declares for `method path` at `status`. */
function declaredCodes(method: string, path: string, status: number): string[] {
  const res = doc.paths[path]?.[method.toLowerCase()]?.responses[String(status)];
  assert.ok(res, `${method} ${path} declares ${status}`);
  const ref = res.content?.['application/json']?.schema.$ref ?? '';
  const component = doc.components.schemas[ref.replace('#/components/schemas/', '')];
  const codes = component?.allOf?.[1]?.properties?.['error']?.properties?.['code']?.enum;
  assert.ok(codes, `${method} ${path} ${status}: ${ref} has an enum of codes`);
  return codes;
}

describe('error codes per route in openapi.json', () => {
  test('every error response narrows `error.code` to codes of its status', () => {
    let narrowed = 0;
    for (const [path, item] of Object.entries(doc.paths))
      for (const [method, op] of Object.entries(item)) {
        for (const status of Object.keys(op.responses ?? {})) {
          if (!/^[45]/.test(status) || path === '/readyz') continue;
          const codes = declaredCodes(method, path, Number(status));
          assert.ok(codes.length > 0);
          for (const c of codes)
            assert.ok(answersWith(c as ErrorCode, Number(status)), `${method} ${path} ${status}: ${c}`);
          if (codes.length < codesOfStatus(Number(status)).length) narrowed++;
        }
      }
    // The session routes (and the others naming one resource) answer one kind of 404.
    assert.deepEqual(declaredCodes('GET', '/v1/sessions/{id}', 404), ['session_not_found']);
    assert.deepEqual(declaredCodes('GET', '/v1/webhooks/{id}', 404), ['webhook_not_found']);
    assert.ok(narrowed >= 20, `${narrowed} responses narrower than their status`);
  });

  test('every code has a status and is in the default enum of that status', () => {
    for (const c of ERROR_CODES) assert.ok(codesOfStatus(ERROR_STATUS[c]).includes(c), c);
  });

  test('a code the route does not declare is caught by the response check', async () => {
    const app = Fastify({ logger: false });
    app.setValidatorCompiler(validatorCompiler);
    app.setSerializerCompiler(checkedSerializer(Infinity));
    await app.register(errorsPlugin);
    const schema = { response: { 200: {}, ...routeErrors({ 404: ['session_not_found'] }, 404) } };
    app.get('/declared', { schema }, async () => {
      throw new NotFound('session');
    });
    app.get('/undeclared', { schema }, async () => {
      throw new NotFound('webhook');
    });
    try {
      const ok = await app.inject({ method: 'GET', url: '/declared' });
      assert.equal(ok.statusCode, 404);
      assert.deepEqual(ok.json(), {
        error: {
          code: 'session_not_found',
          message: 'No session with this id.',
          request_id: ok.headers['x-request-id'],
        },
      });
      const drift = await app.inject({ method: 'GET', url: '/undeclared' });
      assert.equal(drift.statusCode, 500, drift.body);
    } finally {
      await app.close();
    }
  });
});

describe('the codes routes answer are in their enum', () => {
  let h: Harness;
  const KEY = 'k-error-codes';
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, RATE_LIMIT_PER_MIN: '100000' } });
  });
  after(async () => h.close());

  /** Drives one refusal; `code` null: whichever the route answers (it must still be in the enum). */
  async function expectCode(
    method: string,
    url: string,
    path: string,
    status: number,
    code: string | null,
    body?: unknown,
  ) {
    const res = await h.api.as(KEY).req(method, url, body);
    assert.equal(res.status, status, JSON.stringify(res.body));
    code ??= String(res.body?.error?.code);
    assert.equal(res.body?.error?.code, code, JSON.stringify(res.body));
    assert.ok(
      declaredCodes(method, path, status).includes(code),
      `${method} ${path} ${status} lists ${code}`,
    );
  }

  test('404, 409, 412 and 400 of the session routes', async () => {
    await expectCode('GET', '/v1/sessions/ses_nothingHere000', '/v1/sessions/{id}', 404, 'session_not_found');
    const created = await h.api.as(KEY).req('POST', '/v1/sessions', { input: 'hi', start: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    await expectCode(
      'GET',
      `/v1/sessions/${id}/iterations/7`,
      '/v1/sessions/{id}/iterations/{n}',
      404,
      'iteration_not_found',
    );
    await expectCode(
      'POST',
      `/v1/sessions/${id}/fork`,
      '/v1/sessions/{id}/fork',
      404,
      'iteration_not_found',
      {
        at_iteration: 5,
      },
    );
    await expectCode('POST', `/v1/sessions/${id}/retry`, '/v1/sessions/{id}/retry', 409, null, {});
    const stale = await fetch(`${h.service.url}/v1/sessions/${id}`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${KEY}`, 'if-match': '"999"' },
    });
    assert.equal(stale.status, 412);
    const body = (await stale.json()) as { error: { code: string } };
    assert.equal(body.error.code, 'revision_mismatch');
    assert.ok(declaredCodes('DELETE', '/v1/sessions/{id}', 412).includes('revision_mismatch'));
    await expectCode('POST', '/v1/sessions', '/v1/sessions', 400, 'invalid_request', { input: 5 });
  });

  test('404 of the other resources', async () => {
    await expectCode('GET', '/v1/webhooks/wh_nothingHere0', '/v1/webhooks/{id}', 404, 'webhook_not_found');
    await expectCode(
      'GET',
      '/v1/schedules/sch_nothingHere00',
      '/v1/schedules/{id}',
      404,
      'schedule_not_found',
    );
    await expectCode('GET', '/v1/memory/nothing.txt', '/v1/memory/{path}', 404, 'file_not_found');
  });
});
