import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  CLIENT_TYPES,
  OPENAPI_JSON,
  ROOT,
  clientTypesText,
  servedApi,
  type ServedApi,
} from '../helpers/openapi.js';

const run = promisify(execFile);

type Operation = {
  operationId?: string;
  summary?: string;
  tags?: string[];
  security?: unknown[];
  parameters?: Array<{ $ref?: string; name?: string; in?: string }>;
  responses: Record<
    string,
    { headers?: Record<string, unknown>; content?: Record<string, { schema?: any }> }
  >;
};

/** `/v1/sessions/:id` and `/docs/static/*` as the document writes paths, trailing slash dropped. */
const templated = (url: string) =>
  url
    .replace(/:([A-Za-z0-9_]+)/g, '{$1}')
    .replace(/\*$/, '{path}')
    .replace(/(.)\/$/, '$1');

describe('OpenAPI document', () => {
  let api: ServedApi;
  let ops: Array<{ path: string; method: string; op: Operation }>;
  before(async () => {
    api = await servedApi();
    ops = Object.entries(api.document.paths).flatMap(([p, item]) =>
      Object.entries(item).map(([method, op]) => ({ path: p, method, op: op as unknown as Operation })),
    );
  });

  it('passes `redocly lint` with the recommended rules, with no errors', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'openapi-'));
    try {
      const file = path.join(dir, 'openapi.json');
      await writeFile(file, JSON.stringify(api.document));
      // Redocly exits non-zero on errors; the JSON report says which.
      const out = await run(
        process.execPath,
        [
          path.join(ROOT, 'node_modules/@redocly/cli/bin/cli.js'),
          'lint',
          file,
          '--config',
          path.join(ROOT, 'redocly.yaml'),
          '--format=json',
        ],
        {
          cwd: dir,
          env: {
            ...process.env,
            REDOCLY_TELEMETRY: 'off',
            REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true',
            CI: 'true',
          },
          maxBuffer: 16 * 1024 * 1024,
        },
      ).catch((err: { stdout?: string; stderr?: string }) => ({
        stdout: err.stdout ?? '',
        stderr: err.stderr,
      }));
      const report = JSON.parse(out.stdout) as {
        totals: { errors: number };
        problems: Array<{ ruleId: string; severity: string; message: string; location: unknown }>;
      };
      const errors = report.problems.filter((p) => p.severity === 'error');
      assert.equal(report.totals.errors, 0, JSON.stringify(errors, null, 2));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('passes Spectral (spectral:oas + OWASP, .spectral.yaml) with no errors, rate-limit headers declared', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'openapi-'));
    try {
      const file = path.join(dir, 'openapi.json');
      await writeFile(file, JSON.stringify(api.document));
      const out = await run(
        process.execPath,
        [
          path.join(ROOT, 'node_modules/@stoplight/spectral-cli/dist/index.js'),
          'lint',
          file,
          '-r',
          path.join(ROOT, '.spectral.yaml'),
          '-f',
          'json',
          '--fail-severity',
          'error',
        ],
        { cwd: ROOT, maxBuffer: 64 * 1024 * 1024 },
      ).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? '' }));
      const problems = JSON.parse(out.stdout) as Array<{ code: string; severity: number; path: string[] }>;
      assert.ok(problems.length > 0, 'Spectral ran the rulesets (their warnings are kept)');
      const errors = problems.filter((p) => p.severity === 0);
      assert.deepEqual(errors, [], JSON.stringify(errors.slice(0, 20), null, 2));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    // What the OWASP rate-limit rules ask for, on a mutating /v1 route: X-RateLimit-* on its answers, Retry-After on 429.
    const create = api.document.paths['/v1/sessions']!['post'] as unknown as Operation;
    for (const status of ['201', '429'])
      for (const h of ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'])
        assert.ok(create.responses[status]?.headers?.[h], `${h} on POST /v1/sessions ${status}`);
    assert.ok(create.responses['429']?.headers?.['Retry-After']);
    assert.ok(create.responses['503']?.headers?.['Retry-After']);
  });

  it('has every route the service answers (HEAD aside: every GET answers it)', () => {
    const documented = new Map(
      Object.entries(api.document.paths).map(([p, item]) => [
        p,
        { methods: new Set(Object.keys(item)), re: new RegExp(`^${p.replace(/\{[^}]+\}/g, '[^/]+')}$`) },
      ]),
    );
    const missing: string[] = [];
    const hidden: string[] = [];
    for (const { method, url, hidden: hide } of api.routes) {
      if (method === 'HEAD') continue;
      const p = templated(url);
      // Exactly this path, or a fixed file under a documented template (the OpenAPI UI's /docs/static/{path}).
      const entry = documented.get(p) ?? [...documented.values()].find((d) => d.re.test(p));
      if (entry?.methods.has(method.toLowerCase())) continue;
      (hide ? hidden : missing).push(`${method} ${url}`);
    }
    assert.ok(api.routes.length > 20, 'the onRoute hook saw the routes');
    assert.deepEqual(missing, [], 'routes the service answers that the document lacks');
    // A route may leave the document only by `schema: { hide: true }`, and only these: the catch-all that answers
    // unknown /v1 paths (401 without a key, else 404 route_not_found: test/sessions/sessions-invalid.test.ts) is no operation.
    assert.deepEqual(
      hidden.sort(),
      ['DELETE /v1/*', 'GET /v1/*', 'PATCH /v1/*', 'POST /v1/*', 'PUT /v1/*'],
      'routes hidden from the document',
    );
  });

  it('is OpenAPI 3.1 with a summary, an operationId and a tag on each operation', () => {
    assert.equal(api.document.openapi, '3.1.0');
    assert.ok(Array.isArray(api.document['servers']) && api.document['servers'].length > 0);
    const ids = new Set<string>();
    for (const { path: p, method, op } of ops) {
      assert.ok(op.summary, `${method} ${p}: summary`);
      assert.ok(op.operationId && !ids.has(op.operationId), `${method} ${p}: a unique operationId`);
      ids.add(op.operationId);
      assert.ok(op.tags?.length, `${method} ${p}: tags`);
    }
  });

  it('asks for a key only where one is needed', () => {
    assert.deepEqual(api.document['security'], [{ bearer: [] }]);
    for (const { path: p, method, op } of ops) {
      const open = !p.startsWith('/v1/');
      assert.deepEqual(op.security, open ? [] : undefined, `${method} ${p}`);
      if (!open) assert.ok(op.responses['401'], `${method} ${p}: 401`);
    }
  });

  it('gives each 4xx and 5xx the error envelope, and each success its body schema', () => {
    for (const { path: p, method, op } of ops) {
      const codes = Object.keys(op.responses);
      assert.ok(
        codes.some((c) => /^[123]/.test(c)),
        `${method} ${p}: a success (or redirect) status`,
      );
      for (const [code, res] of Object.entries(op.responses)) {
        // Switching Protocols, No Content, redirects and Not Modified have no body.
        if (/^[13]/.test(code) || code === '204') continue;
        const schema = res.content && Object.values(res.content)[0]?.schema;
        assert.ok(schema, `${method} ${p} ${code}: a body schema`);
        if (/^[45]/.test(code) && p !== '/readyz') {
          // The envelope narrowed to the codes of this status (src/openapi/responses.ts `errors`/`routeErrors`).
          assert.match(
            String(schema.$ref),
            new RegExp(`^#/components/schemas/Error${code}`),
            `${method} ${p} ${code}`,
          );
        }
      }
    }
  });

  it('documents the statuses the routes answer: 201 create and fork, 202 queued work, 412, ETag', () => {
    const op = (method: string, p: string) => api.document.paths[p]![method] as unknown as Operation;
    const statuses = (method: string, p: string) => Object.keys(op(method, p).responses);
    assert.ok(statuses('post', '/v1/sessions').includes('201'));
    assert.ok(statuses('post', '/v1/sessions/{id}/fork').includes('201'));
    for (const p of ['messages', 'continue', 'retry', 'resume', 'cancel', 'tool-results']) {
      assert.ok(statuses('post', `/v1/sessions/{id}/${p}`).includes('202'), p);
      assert.ok(statuses('post', `/v1/sessions/{id}/${p}`).includes('412'), p);
    }
    assert.ok(statuses('get', '/v1/sessions/{id}/events').includes('410'));
    assert.ok(statuses('get', '/v1/sessions/{id}/stream').includes('101'));
    assert.ok(op('get', '/v1/sessions/{id}').responses['200']!.headers?.['ETag']);
    assert.ok(op('post', '/v1/sessions/{id}/messages').responses['202']!.headers?.['ETag']);
    assert.ok(op('post', '/v1/sessions').responses['429']!.headers?.['Retry-After']);
    assert.ok(op('get', '/v1/sessions').responses['503']!.headers?.['Retry-After']);
    const events = op('get', '/v1/sessions/{id}/events').responses['200']!.content!;
    assert.deepEqual(Object.keys(events).sort(), ['application/json', 'text/event-stream']);
  });

  it("says which 413s are MAX_TURN_BYTES too: a step's tool results together, a follow-up's turn", () => {
    const described = (method: string, p: string) =>
      String(
        (api.document.paths[p]![method] as { responses: Record<string, { description?: string }> }).responses[
          '413'
        ]?.description,
      );
    for (const [method, p] of [
      ['put', '/v1/sessions/{id}/tool-results/{tool_use_id}'],
      ['post', '/v1/sessions/{id}/tool-results'],
      ['post', '/v1/sessions/{id}/tool-calls/{tool_use_id}'],
      ['post', '/v1/sessions/{id}/messages'],
      ['post', '/v1/chat'],
    ] as const) {
      assert.match(described(method, p), /BODY_LIMIT/, `${method} ${p}`);
      assert.match(described(method, p), /MAX_TURN_BYTES/, `${method} ${p}`);
    }
    // A route that adds to no turn keeps the status's own answer.
    assert.doesNotMatch(described('post', '/v1/sessions/{id}/cancel'), /MAX_TURN_BYTES/);
  });

  it('documents Idempotency-Key on every POST, If-Match on mutations, Last-Event-ID on the event stream', () => {
    const names = (op: Operation) =>
      (op.parameters ?? []).map((x) =>
        x.$ref ? x.$ref.replace('#/components/parameters/', '') : `${x.in}:${x.name}`,
      );
    for (const { path: p, method, op } of ops) {
      if (!p.startsWith('/v1/')) continue;
      if (method === 'post') assert.ok(names(op).includes('IdempotencyKey'), `${method} ${p}`);
      if (method !== 'get' && p.startsWith('/v1/sessions/{id}'))
        assert.ok(names(op).includes('header:if-match'), `${method} ${p}: If-Match`);
    }
    const ev = api.document.paths['/v1/sessions/{id}/events']!['get'] as unknown as Operation;
    assert.ok(names(ev).includes('header:last-event-id'));
  });

  it('is committed as openapi.json, and the client types generated from it are current (`npm run openapi`)', async () => {
    const committed = JSON.parse(await readFile(OPENAPI_JSON, 'utf8'));
    assert.deepEqual(committed, api.document, 'openapi.json is stale: run `npm run openapi`');
    const types = await readFile(CLIENT_TYPES, 'utf8');
    assert.ok(
      types === (await clientTypesText(api.document)),
      'packages/client/src/openapi.ts is stale: run `npm run openapi`',
    );
  });
});
