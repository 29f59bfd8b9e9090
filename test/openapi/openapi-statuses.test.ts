/**
 * Every status a route answers is declared in the OpenAPI document for that route (a generated client compares
 * `status === 409` only if the document names 409). Drives the refusals that were once missing from it — a tool
 * result when nothing awaits one, a PATCH of `tools` while a call waits, the WebSocket route's refused origin and a
 * plain GET of it — and checks each answer's status and its error envelope against the served document. Every
 * other test checks the same of whatever it causes: the harness (test/helpers/declared-statuses.ts) records each
 * answer and fails at close on a status openapi.json does not declare for its route.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocket } from 'ws';
import { AnswerLog } from '../helpers/declared-statuses.js';
import { startHarness, type Harness } from '../helpers/service.js';

type Doc = { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };

describe('statuses answered are statuses declared', () => {
  let h: Harness;
  let doc: Doc;
  const KEY = 'k-statuses';
  before(async () => {
    h = await startHarness({
      env: { API_KEYS: `acme:${KEY}`, CORS_ORIGINS: 'https://app.example', RATE_LIMIT_PER_MIN: '1000' },
    });
    doc = (await h.api.req('GET', '/docs/json')).body as Doc;
  });
  after(async () => h.close());

  const declared = (method: string, path: string) =>
    Object.keys(doc.paths[path]?.[method.toLowerCase()]?.responses ?? {});

  function assertDeclared(method: string, path: string, status: number, body: any, code: string) {
    assert.equal(body?.error?.code, code, JSON.stringify(body));
    assert.ok(
      declared(method, path).includes(String(status)),
      `${method} ${path} answered ${status} (${code}) but declares only ${declared(method, path).join(', ')}`,
    );
  }

  test('PUT …/tool-results/{tool_use_id} with nothing awaiting results: 409, declared', async () => {
    const s = await h.api.req('POST', '/v1/sessions', { input: 'hi', start: false });
    const res = await h.api.req('PUT', `/v1/sessions/${s.body.id}/tool-results/toolu_x`, { content: 'x' });
    assert.equal(res.status, 409);
    assertDeclared('PUT', '/v1/sessions/{id}/tool-results/{tool_use_id}', 409, res.body, res.body.error.code);
  });

  test('PATCH /v1/sessions/{id} of tools while a call waits for approval: 409 tool_call_pending, declared', async () => {
    const s = await h.api.req('POST', '/v1/sessions', {
      input: 'What is the weather in Paris?',
      tools: ['get_weather'],
      approval: 'always',
    });
    await h.api.waitStatus(s.body.id, 'requires_action', 30_000);
    const res = await h.api.req('PATCH', `/v1/sessions/${s.body.id}`, { tools: ['calculate_sum'] });
    assert.equal(res.status, 409);
    assertDeclared('PATCH', '/v1/sessions/{id}', 409, res.body, 'tool_call_pending');
  });

  test("the rate limiter's headers on a created session and on a 409 are the ones declared", async () => {
    const created = await h.api.req('POST', '/v1/sessions', { input: 'hi', start: false });
    const refused = await h.api.req('PUT', `/v1/sessions/${created.body.id}/tool-results/toolu_x`, {
      content: 'x',
    });
    const answers: Array<[string, string, number, Headers]> = [
      ['post', '/v1/sessions', created.status, created.headers],
      ['put', '/v1/sessions/{id}/tool-results/{tool_use_id}', refused.status, refused.headers],
    ];
    assert.deepEqual(
      answers.map((a) => a[2]),
      [201, 409],
    );
    for (const [method, path, status, headers] of answers) {
      const res = doc.paths[path]?.[method]?.responses[String(status)] as { headers?: object } | undefined;
      const names = Object.keys(res?.headers ?? {}).map((n) => n.toLowerCase());
      for (const h of ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset']) {
        assert.match(headers.get(h) ?? '', /^\d+$/, `${method} ${path} ${status} sends ${h}`);
        assert.ok(names.includes(h), `${method} ${path} ${status} declares ${h}: ${names.join(', ')}`);
      }
    }
  });

  test('the WebSocket route: an unlisted Origin is a 403 and a plain GET a 426, both in the envelope, declared', async () => {
    const s = await h.api.req('POST', '/v1/sessions', { input: 'hi', start: false });
    const path = '/v1/sessions/{id}/stream';
    const url = `${h.service.url.replace('http', 'ws')}/v1/sessions/${s.body.id}/stream`;
    const refused = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const ws = new WebSocket(url, {
        headers: { authorization: `Bearer ${KEY}`, origin: 'https://evil.example' },
      });
      ws.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (d: Buffer) => (body += d.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      ws.on('open', () => reject(new Error('the upgrade was accepted')));
      ws.on('error', () => undefined);
    });
    assert.equal(refused.status, 403);
    assertDeclared('GET', path, 403, JSON.parse(refused.body), 'origin_not_allowed');

    const plain = await h.api.req('GET', `/v1/sessions/${s.body.id}/stream`);
    assert.equal(plain.status, 426);
    assert.equal(plain.headers.get('upgrade'), 'websocket');
    assertDeclared('GET', path, 426, plain.body, 'upgrade_required');
  });

  test('the harness records every answer by route pattern, and its check names one the document lacks', () => {
    const seen = h.answers.answers().map((a) => `${a.method} ${a.path} ${a.status}`);
    for (const want of [
      'POST /v1/sessions 201',
      'PUT /v1/sessions/{id}/tool-results/{tool_use_id} 409',
      'PATCH /v1/sessions/{id} 409',
      'GET /v1/sessions/{id}/stream 403',
      'GET /v1/sessions/{id}/stream 426',
    ])
      assert.ok(seen.includes(want), `${want} not recorded: ${seen.join('; ')}`);
    assert.deepEqual(h.answers.undeclared(), []);
    const log = new AnswerLog();
    log.add('PATCH', '/v1/sessions/:id', 409);
    log.add('HEAD', '/v1/memory/*', 404);
    log.add('OPTIONS', '/*', 204);
    log.add('GET', undefined, 404);
    const lacking = { paths: { '/v1/sessions/{id}': { patch: { responses: { '200': {} } } } } };
    assert.deepEqual(log.undeclared(lacking), [
      'GET /v1/memory/{path} → 404 (declares no such operation)',
      'PATCH /v1/sessions/{id} → 409 (declares 200)',
    ]);
    assert.deepEqual(log.undeclared(), []);
  });
});
