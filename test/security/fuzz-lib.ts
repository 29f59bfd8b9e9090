/**
 * The API fuzzer's generators and runner (test/security/fuzz.test.ts runs it in `npm test`, `npm run fuzz` longer): requests
 * over every /v1 route's path, query, headers and body, and WebSocket frames, built from the routes' zod schemas (the
 * keys of each body schema, valid templates) mixed with hostile values (deep nesting, huge strings, odd encodings,
 * prototype keys, numbers at the edges).
 */
import fc from 'fast-check';
import type { z } from 'zod';
import { chatBody } from '../../src/chat/request.js';
import {
  createSessionBody,
  decisionBody,
  forkBody,
  patchSessionBody,
  postMessageBody,
  replaceMessagesBody,
  toolResultBody,
  toolResultsBody,
} from '../../src/schemas.js';
import { createWebhookBody, patchWebhookBody } from '../../src/webhooks/schemas.js';
import { claimBody, putToolBody } from '../../src/tenant-tools/schemas.js';
import { createScheduleBody, patchScheduleBody } from '../../src/schedules/schemas.js';

/** Keys of a zod object schema (the body schemas are strict objects, possibly refined). */
const keysOf = (schema: z.ZodType): string[] => Object.keys((schema as unknown as { shape: object }).shape);

const deepText = (depth: number, open: string, close: string) => open.repeat(depth) + close.repeat(depth);

/** Values chosen to break parsers, validators, hashing and storage. As JSON text (so invalid text is possible too). */
export const hostileJson: fc.Arbitrary<string> = fc.oneof(
  fc.integer({ min: 60, max: 5000 }).map((d) => deepText(d, '[', ']')),
  fc.integer({ min: 60, max: 5000 }).map((d) => '{"a":'.repeat(d) + '1' + '}'.repeat(d)),
  fc.integer({ min: 1, max: 300_000 }).map((n) => JSON.stringify('x'.repeat(n))),
  fc.constantFrom(
    '{"__proto__":{"polluted":1}}',
    '{"constructor":{"prototype":{"polluted":1}}}',
    '{"prototype":null,"toString":1,"hasOwnProperty":"x"}',
    '1e308',
    '-1e308',
    '1e-400',
    '-0',
    '9007199254740993',
    '18446744073709551615',
    '"\\ud800"',
    '"\\u0000"',
    '"\\u202e\\u0000\\ufeff"',
    '""',
    '[]',
    '{}',
    'null',
    'true',
    '"../../etc/passwd"',
    '"%00%2e%2e%2f"',
    '"ses_AAAAAAAAAAAAAAAA"',
    '{"type":"tool_use","id":"x","name":"x","input":{}}',
    '{"$ref":"https://example.invalid/x"}',
    '{"$id":"https://example.invalid/s","type":"object"}',
  ),
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  fc.string({ unit: 'binary', maxLength: 40 }).map((s) => JSON.stringify(s)),
);

/**
 * Valid-looking bodies per schema, from which one key is replaced or added with a hostile or random value (and which
 * test/sessions/sessions-invalid.test.ts sends as they are, to reach each route's query check).
 */
export const templates: Record<string, Record<string, unknown>> = {
  create: { start: false, input: 'hello', metadata: { k: 'v' } },
  patch: { metadata: { k: 'w' } },
  message: { text: 'follow-up' },
  toolResult: { content: 'result' },
  toolResults: { results: [{ tool_use_id: 'toolu_1', content: 'r' }] },
  decision: { decision: 'approve' },
  fork: { at_iteration: 0 },
  compact: { instructions: 'keep the numbers' },
  // A loopback URL: refused by the address guard (no WEBHOOK_ALLOW_PRIVATE here), never resolved elsewhere.
  mcpServer: { url: 'http://127.0.0.1:9/mcp', headers: { authorization: 'Bearer x' } },
  empty: {},
  chat: {
    id: 'ses_AAAAAAAAAAAAAAAA',
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
    trigger: 'submit-message',
  },
  // The AI SDK's `regenerate()`: the newest answer made again (POST /v1/chat's other trigger).
  chatRegenerate: {
    id: 'ses_AAAAAAAAAAAAAAAA',
    messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'hi' }] }],
    trigger: 'regenerate-message',
    messageId: 'ses_AAAAAAAAAAAAAAAA-1',
  },
  // Loopback only: the fuzz service allows private targets, and port 9 (discard) refuses at once.
  webhookCreate: { url: 'http://127.0.0.1:9/hook', events: ['session.status'] },
  webhookPatch: { description: 'd', url: 'http://127.0.0.1:9/other' },
  tool: { description: 'd', input_schema: { type: 'object' }, runner: { type: 'worker' } },
  claim: { tools: ['fuzz_tool'], wait_ms: 0 },
  schedule: { cron: '0 9 * * 1-5', timezone: 'Europe/Paris', session: { input: 'report', start: false } },
  schedulePatch: { paused: true },
  replaceMessages: { messages: [{ role: 'user', content: 'hello again' }] },
  clientToken: { session_id: 'ses_AAAAAAAAAAAAAAAA', scopes: ['read'], ttl_s: 60, subject: 'user-1' },
};
const schemaKeys: Record<string, string[]> = {
  create: keysOf(createSessionBody),
  patch: keysOf(patchSessionBody),
  message: keysOf(postMessageBody),
  toolResult: keysOf(toolResultBody),
  toolResults: keysOf(toolResultsBody),
  decision: keysOf(decisionBody),
  fork: keysOf(forkBody),
  compact: ['instructions'],
  mcpServer: ['url', 'headers'],
  empty: ['params'],
  chat: keysOf(chatBody),
  chatRegenerate: keysOf(chatBody),
  webhookCreate: keysOf(createWebhookBody),
  webhookPatch: keysOf(patchWebhookBody),
  tool: keysOf(putToolBody),
  claim: keysOf(claimBody),
  schedule: keysOf(createScheduleBody),
  schedulePatch: keysOf(patchScheduleBody),
  replaceMessages: keysOf(replaceMessagesBody),
  clientToken: ['session_id', 'scopes', 'ttl_s', 'subject'],
};

const bodyFor = (kind: string): fc.Arbitrary<string | undefined> => {
  const keys = [...schemaKeys[kind]!, '__proto__', 'constructor', 'x'];
  const template = templates[kind]!;
  return fc.oneof(
    { weight: 4, arbitrary: fc.constant(JSON.stringify(template)) },
    {
      weight: 10,
      arbitrary: fc.tuple(fc.constantFrom(...keys), hostileJson).map(([k, v]) => {
        const base = JSON.stringify(template);
        const rest = base === '{}' ? '' : `,${base.slice(1, -1)}`;
        return `{${JSON.stringify(k)}:${v}${rest}}`;
      }),
    },
    { weight: 2, arbitrary: hostileJson },
    { weight: 1, arbitrary: fc.string({ maxLength: 50 }) },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
};

export interface Ids {
  own: string;
  canaries: string[];
}

/** A path parameter: a real id (own, another tenant's), or a hostile spelling. */
const idArb = (ids: Ids) =>
  fc.oneof(
    { weight: 5, arbitrary: fc.constant(ids.own) },
    { weight: 3, arbitrary: fc.constantFrom(...ids.canaries) },
    {
      weight: 3,
      arbitrary: fc.oneof(
        fc.constantFrom(
          '..',
          '%2e%2e',
          '%2F',
          'ses_',
          `${ids.canaries[0]}%00`,
          encodeURIComponent(`${ids.canaries[0]}/../${ids.own}`),
          'ses_' + 'A'.repeat(300),
          '%ZZ',
          '%',
          '__proto__',
          'constructor',
          '0',
          '-1',
          '18446744073709551615',
        ),
        fc.string({ maxLength: 30 }).map(encodeURIComponent),
      ),
    },
  );

const queryArb = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  {
    weight: 4,
    arbitrary: fc
      .array(
        fc.tuple(
          fc.constantFrom('after', 'limit', 'cursor', 'status', 'include', '__proto__', 'x', 'after[]'),
          fc.oneof(
            fc.constantFrom(
              '0',
              '-1',
              '1e308',
              '18446744073709551615-18446744073709551615',
              '18446744073709551616-0',
              '1-99999999999999999999',
              '0-0',
              '$',
              '+',
              '-',
              'running',
              '%00',
              '%ZZ',
              'x'.repeat(5000),
            ),
            fc.string({ maxLength: 20 }).map(encodeURIComponent),
            fc.integer().map(String),
          ),
        ),
        { maxLength: 4 },
      )
      .map((pairs) => '?' + pairs.map(([k, v]) => `${k}=${v}`).join('&')),
  },
);

export interface FuzzRequest {
  /** The route as `routes` names it (`GET /v1/sessions/:id`), for the per-route figures. */
  route: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string | undefined;
}

/**
 * Routes: method, path template, body kind. Every `/v1` operation of openapi.json but those in `UNFUZZED` (the
 * fuzzer's test checks it).
 */
export const routes: Array<[string, string, string | null]> = [
  ['POST', '/v1/sessions', 'create'],
  ['GET', '/v1/sessions', null],
  ['GET', '/v1/sessions/:id', null],
  ['DELETE', '/v1/sessions/:id', null],
  ['PATCH', '/v1/sessions/:id', 'patch'],
  ['GET', '/v1/sessions/:id/messages', null],
  ['POST', '/v1/sessions/:id/messages', 'message'],
  ['GET', '/v1/sessions/:id/iterations', null],
  ['GET', '/v1/sessions/:id/iterations/:n', null],
  ['POST', '/v1/sessions/:id/tool-calls/:tool_use_id', 'decision'],
  ['PUT', '/v1/sessions/:id/tool-results/:tool_use_id', 'toolResult'],
  ['POST', '/v1/sessions/:id/tool-results', 'toolResults'],
  ['POST', '/v1/sessions/:id/continue', 'empty'],
  ['POST', '/v1/sessions/:id/retry', 'empty'],
  ['POST', '/v1/sessions/:id/cancel', 'empty'],
  ['POST', '/v1/sessions/:id/resume', 'empty'],
  ['POST', '/v1/sessions/:id/fork', 'fork'],
  ['POST', '/v1/sessions/:id/compact', 'compact'],
  ['GET', '/v1/sessions/:id/events', null],
  ['GET', '/v1/tools', null],
  ['GET', '/v1/webhooks', null],
  ['GET', '/v1/webhooks/:id', null],
  ['DELETE', '/v1/webhooks/:id', null],
  ['GET', '/v1/webhooks/:id/deliveries', null],
  ['GET', '/v1/memory', null],
  ['GET', '/v1/memory/:path', null],
  ['DELETE', '/v1/memory/:path', null],
  ['POST', '/v1/chat', 'chat'],
  ['POST', '/v1/chat', 'chatRegenerate'],
  ['GET', '/v1/chat/:id/stream', null],
  ['GET', '/v1/chat/:id/messages', null],
  ['PUT', '/v1/mcp-servers/:name', 'mcpServer'],
  ['GET', '/v1/mcp-servers', null],
  ['GET', '/v1/mcp-servers/:name', null],
  ['DELETE', '/v1/mcp-servers/:name', null],
  ['POST', '/v1/webhooks', 'webhookCreate'],
  ['PATCH', '/v1/webhooks/:id', 'webhookPatch'],
  ['POST', '/v1/webhooks/:id/test', 'empty'],
  // Outside /v1 (no key needed; the key sent is ignored): health, metrics, docs, console, with hostile paths.
  ['GET', '/healthz', null],
  ['GET', '/readyz', null],
  ['GET', '/metrics', null],
  ['GET', '/docs', null],
  ['GET', '/docs/json', null],
  ['GET', '/docs/static/:path', null],
  ['GET', '/console/', null],
  ['GET', '/console/:path', null],
  ['OPTIONS', '/v1/sessions', null],
  ['PUT', '/v1/tools/:name', 'tool'],
  ['GET', '/v1/tools/:name', null],
  ['DELETE', '/v1/tools/:name', null],
  ['POST', '/v1/tool-tasks/claim', 'claim'],
  ['POST', '/v1/tool-tasks/:id/heartbeat', 'empty'],
  ['POST', '/v1/tool-tasks/:id/result', 'toolResult'],
  ['PUT', '/v1/sessions/:id/messages', 'replaceMessages'],
  ['GET', '/v1/sessions/:id/children', null],
  ['POST', '/v1/schedules', 'schedule'],
  ['GET', '/v1/schedules', null],
  ['GET', '/v1/schedules/:id', null],
  ['PATCH', '/v1/schedules/:id', 'schedulePatch'],
  ['DELETE', '/v1/schedules/:id', null],
  ['GET', '/v1/schedules/:id/runs', null],
  ['GET', '/v1/schedules/:id/events', null],
  ['POST', '/v1/client-tokens', 'clientToken'],
  ['DELETE', '/v1/client-tokens/:id', null],
  ['GET', '/v1/usage', null],
];

/**
 * `/v1` operations the fuzzer leaves out of its REST phase: the WebSocket upgrade, fuzzed by its own upgrade
 * requests and frames. (Webhook URLs are loopback ones: see the webhook templates.)
 */
export const UNFUZZED = ['GET /v1/sessions/:id/stream'];

export function requestArb(ids: Ids, token: string): fc.Arbitrary<FuzzRequest> {
  return fc
    .tuple(
      fc.constantFrom(...routes),
      idArb(ids),
      fc.oneof(
        fc.constantFrom(
          'toolu_1',
          '1',
          '0',
          '-1',
          '99999999999',
          'notes/a.md',
          '..%2F..%2Fetc%2Fpasswd',
          '%2e%2e/x',
        ),
        fc.string({ maxLength: 20 }).map(encodeURIComponent),
      ),
      queryArb,
      fc.record(
        {
          authorization: fc.oneof(
            { weight: 8, arbitrary: fc.constant(`Bearer ${token}`) },
            {
              weight: 1,
              arbitrary: fc.constantFrom('Bearer ', 'Basic eA==', `Bearer ${token}x`, 'bearer  ' + token),
            },
          ),
          'content-type': fc.oneof(
            { weight: 8, arbitrary: fc.constant('application/json') },
            {
              weight: 1,
              arbitrary: fc.constantFrom(
                'text/plain',
                'application/json; charset=latin1',
                'application/x-www-form-urlencoded',
                'application/jsonx',
              ),
            },
          ),
          'if-match': fc.constantFrom(
            '"1"',
            'W/"2"',
            '*',
            '"-1"',
            '"99999999999999999999"',
            'x',
            '"1", "2", W/"3"',
            Array.from({ length: 17 }, (_, i) => `"${i}"`).join(', '),
            '"01"',
          ),
          'content-encoding': fc.constantFrom('gzip', 'identity', 'br, gzip', 'x'.repeat(300)),
          'idempotency-key': fc.oneof(
            fc.constantFrom('k1', 'k2', 'x'.repeat(300), '\u00e9'),
            fc.string({ maxLength: 10 }),
          ),
          accept: fc.constantFrom('application/json', '*/*', 'text/html'),
        },
        { requiredKeys: ['authorization'] },
      ),
    )
    .chain(([[method, template, kind], id, n, query, headers]) =>
      (kind ? bodyFor(kind) : fc.constant(undefined)).map((body) => ({
        route: `${method} ${template}`,
        method,
        path:
          template
            .replace(
              ':id',
              template.startsWith('/v1/webhooks')
                ? id.startsWith('ses_')
                  ? id.replace('ses_', 'wh_')
                  : id
                : id,
            )
            .replace(':tool_use_id', n)
            .replace(':path', n)
            .replace(':name', n)
            .replace(':n', n) + query,
        // Header values must be ByteStrings for fetch: keep the ones that are.
        headers: Object.fromEntries(Object.entries(headers).filter(([, v]) => /^[\x20-\x7e]*$/.test(v))),
        // The chat route takes its session id in the body: the drawn id (own, a canary, hostile) goes there.
        body:
          (kind === 'chat' || kind === 'chatRegenerate') && body
            ? body.replaceAll('ses_AAAAAAAAAAAAAAAA', id)
            : body,
      })),
    );
}

/** WebSocket frames: the four frame types with schema keys and hostile values, or raw garbage. */
export const frameArb: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc
      .tuple(
        fc.constantFrom('message', 'tool_result', 'tool_call.decide', 'cancel', 'x', '__proto__'),
        fc.constantFrom(
          ...keysOf(postMessageBody),
          ...keysOf(decisionBody),
          'tool_use_id',
          'if_match',
          'ref',
          '__proto__',
        ),
        hostileJson,
      )
      .map(
        ([type, key, value]) =>
          `{"type":${JSON.stringify(type)},"ref":"r","text":"hi",${JSON.stringify(key)}:${value}}`,
      ),
  },
  { weight: 2, arbitrary: hostileJson },
  { weight: 1, arbitrary: fc.string({ maxLength: 100 }) },
);
