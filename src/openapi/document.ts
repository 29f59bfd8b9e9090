/**
 * The OpenAPI document the service serves at /docs/json (`swaggerOptions`): its description, tags, shared headers and
 * parameters, and the transform that turns each route's zod schemas into the document and adds what the routes share
 * (ETag, rate-limit headers, 403 of client tokens). One file over 400 lines on purpose: it is the document's request
 * side and its one transform, read top to bottom; the answers it names are responses.ts.
 */
import type { FastifyDynamicSwaggerOptions, SwaggerTransformObject } from '@fastify/swagger';
import type { FastifySchema } from 'fastify';
import { createJsonSchemaTransform, createJsonSchemaTransformObject } from 'fastify-type-provider-zod';
import type { OpenAPIV3_1 } from 'openapi-types';
import type { z } from 'zod';
import { oneOf } from '../guards.js';
import { errors, routeErrors } from './responses.js';

/**
 * The OpenAPI 3.1 document of the service, built by @fastify/swagger from the routes' zod schemas (request and
 * response bodies, params, query, headers, summaries, operationIds; see routes/*.ts and src/openapi/responses.ts)
 * and completed here with what applies to many routes alike. One file over 400 lines on purpose: each completion
 * below walks the same document once, and read in order they are the document's one description.
 *
 * - `security`: the document's default is the bearer key; public routes say `security: []` in their schema.
 * - request headers the plugins read on many routes: `Idempotency-Key` on every POST under /v1 and on the routes
 *   whose config says `idempotencyKey` (the idempotency plugin honours it there), so it is documented by the same
 *   rule;
 * - response headers: `ETag` on every answer carrying a session, `Retry-After` on 429 and 503, `WWW-Authenticate`
 *   on 401, `Idempotent-Replayed` on a repeated POST;
 * - routes whose owners give no zod schema: the WebSocket route (@fastify/websocket hides WebSocket routes; this
 *   un-hides it and documents the upgrade) and the OpenAPI UI's own routes (/docs…);
 * - statuses every operation can answer whatever its route (400 to a refused upgrade, 421 to a foreign `Host`, 429
 *   for unread bytes, 403 to a client token out of scope).
 *
 * Over 400 lines: each rule above is a few lines applied to every operation in one pass; the /docs routes' schemas
 * are the part to move out if it grows.
 *
 * The WebSocket and SSE protocols themselves (records, frames, close codes, resuming) are specified in docs/API.md
 * §6.2 and §6.3 and the events in §5, linked from the description. `npm run openapi` writes the document to openapi.json; test/openapi/openapi.test.ts lints it with
 * Redocly's recommended rules and checks that every route the service answers is in it.
 */

export const API_VERSION = '0.1.0';

const description = `Runs Anthropic SDK tool-runner sessions durably for other programs: create a session, steer it
between turns (follow-ups, tool-call approval, tool results, params, retry, cancel, fork), and follow its events.

- **Auth**: \`Authorization: Bearer <key>\` on every \`/v1\` route (browsers on a WebSocket: the subprotocols
  \`bearer, <key>\`). The health, metrics and documentation routes need none.
- **Errors**: every 4xx and 5xx answers \`{"error": {"code", "message", "details"?}}\` (schema \`Error\`); the codes are
  a closed set, listed in docs/API.md.
- **Concurrency**: every answer carrying a session has its revision in \`ETag\`; mutations accept \`If-Match\` and
  answer 412 \`revision_mismatch\` when it does not match.
- **Retries**: every POST under \`/v1\` honours \`Idempotency-Key\`, and so does \`PUT /v1/tools/{name}\` (an http
  runner's secret is shown once); 429 and 503 answers carry \`Retry-After\`.
- **Events**: \`GET /v1/sessions/{id}/events\` pages the event log as JSON or streams it as Server-Sent Events;
  \`GET /v1/sessions/{id}/stream\` is the WebSocket. Both protocols (frames, close codes, resume with the last event
  id, exactly once) are specified in docs/API.md of the repository: §6.2 (SSE), §6.3 (WebSocket), §5 (events).
- Every GET route also answers HEAD.`;

const tags = [
  { name: 'sessions', description: 'Create, read, steer and delete sessions.' },
  { name: 'events', description: 'The event log of a session: JSON pages, Server-Sent Events, WebSocket.' },
  { name: 'tools', description: 'The server tools a session may use.' },
  { name: 'chat', description: "The AI SDK's chat protocol (useChat): a session as a UI message stream." },
  { name: 'mcp-servers', description: "The tenant's own MCP servers, whose tools its sessions may use." },
  {
    name: 'client-tokens',
    description:
      'Short-lived bearer tokens for browsers, scoped to one session (docs/API.md "Client tokens").',
  },
  { name: 'memory', description: "The memory tool's files of the caller's tenant, shared by its sessions." },
  { name: 'usage', description: "The tenant's tokens and cost per UTC day (§7.4)." },
  {
    name: 'webhooks',
    description: 'Signed deliveries of session events to your endpoints (Standard Webhooks).',
  },
  { name: 'health', description: 'Liveness, readiness and metrics, for orchestrators; no key needed.' },
  { name: 'docs', description: 'This document and its UI; no key needed.' },
  { name: 'console', description: 'Pages for people, served by the service; no key needed.' },
];

const headers: Record<string, OpenAPIV3_1.HeaderObject> = {
  ETag: {
    description: 'The resource\'s revision, quoted (`"17"`): give it back in `If-Match`.',
    schema: { type: 'string', pattern: '^"\\d+"$' },
  },
  RetryAfter: {
    description: 'Seconds to wait before trying again.',
    schema: { type: 'integer', format: 'int32', minimum: 0, maximum: 86_400 },
  },
  // @fastify/rate-limit's headers (src/plugins/ratelimit.ts), on the mutating /v1 routes when RATE_LIMIT_PER_MIN > 0.
  RateLimitLimit: {
    description: 'Mutating requests a tenant may make per minute (RATE_LIMIT_PER_MIN).',
    schema: { type: 'integer', format: 'int32', minimum: 0, maximum: 2_147_483_647 },
  },
  RateLimitRemaining: {
    description: 'Mutating requests left in the current minute.',
    schema: { type: 'integer', format: 'int32', minimum: 0, maximum: 2_147_483_647 },
  },
  RateLimitReset: {
    description: 'Seconds until the current minute ends and the count starts again.',
    schema: { type: 'integer', format: 'int32', minimum: 0, maximum: 60 },
  },
  WwwAuthenticate: { description: '`Bearer`', schema: { type: 'string' } },
  UiMessageStream: {
    description:
      "The AI SDK's UI message stream protocol version (`DefaultChatTransport` reads the stream by it).",
    schema: { type: 'string', enum: ['v1'] },
  },
  IdempotentReplayed: {
    description:
      '`true` when this is the stored answer of an earlier request with the same `Idempotency-Key`.',
    schema: { type: 'string', enum: ['true'] },
  },
};

const parameters: Record<string, OpenAPIV3_1.ParameterObject> = {
  IdempotencyKey: {
    name: 'Idempotency-Key',
    in: 'header',
    required: false,
    description:
      'Makes the request safe to retry: the same key with the same body returns the first answer (with ' +
      '`Idempotent-Replayed: true`) for IDEMPOTENCY_TTL_S (24 h by default); with another body 422 ' +
      '`idempotency_key_reused`; while the first is still handled 409 `idempotency_in_progress`. 5xx answers are ' +
      'not kept.',
    schema: { type: 'string', pattern: '^[\\x21-\\x7e]{1,255}$' },
  },
};

/** What each status means, for answers whose route gave no description of its own. */
const statusText: Record<string, string> = {
  '200': 'OK',
  '201': 'Created',
  '202': 'Accepted: the work was queued (a run started or will start at the next turn boundary).',
  '101': 'Switching Protocols: the WebSocket is open (frames and close codes: docs/API.md §6.3).',
  '400': 'Invalid request (`invalid_request` with the issues in `details`, `invalid_json`, …).',
  '401': 'No valid bearer key or client token (`unauthorized`; `token_expired` for an expired client token).',
  '403':
    "A client token outside its session's routes or scopes (`scope_denied`), or a WebSocket from an unlisted origin.",
  '404': "No such resource (`session_not_found`, also for another tenant's; `iteration_not_found`, …).",
  '409': "The request does not fit the session's state (the code says why), or `idempotency_in_progress`.",
  '410':
    'Events after the cursor were trimmed from the event log (`cursor_expired`; `details` says how to recover).',
  '412': 'If-Match does not match the revision (`revision_mismatch`; `details.revision`).',
  '302': 'Found: a redirect (`Location`).',
  '304': 'Not Modified (`If-None-Match` matched the ETag).',
  '413': 'The body is larger than BODY_LIMIT (`payload_too_large`).',
  '415': 'The body is not JSON, or is sent with a Content-Encoding (`unsupported_media_type`).',
  '422': 'This Idempotency-Key was used with another request (`idempotency_key_reused`).',
  '429': 'Over a rate or quota (`rate_limited` with Retry-After, `quota_exceeded`).',
  '500': "Something went wrong on the service's side (`internal_error`); the details are in its log.",
  '503': 'The session store is unavailable (`store_unavailable`); try again after Retry-After.',
};

/**
 * zod → JSON Schema adjustments. A plain `z.object` response schema says which fields a client can rely on, not that
 * there are no others (src/openapi/serializer.ts never strips), so it gets no `additionalProperties: false` (zod
 * adds one for outputs); strict request objects keep theirs. Empty `anyOf` branches are dropped, as the type
 * provider's default does.
 */
const zodToJsonConfig = {
  override(ctx: { zodSchema: z.core.$ZodTypes; jsonSchema: z.core.JSONSchema.BaseSchema }) {
    const def = ctx.zodSchema._zod.def;
    if (def.type === 'object' && !def.catchall && ctx.jsonSchema.additionalProperties === false) {
      delete ctx.jsonSchema.additionalProperties;
    }
    // Integers get a format (what generated clients size them by): JavaScript's safe integers fit in int64.
    if (ctx.jsonSchema.type === 'integer' && !ctx.jsonSchema.format) ctx.jsonSchema.format = 'int64';
    if (def.type === 'union' && ctx.jsonSchema.anyOf) {
      ctx.jsonSchema.anyOf = ctx.jsonSchema.anyOf.filter((b) => Object.keys(b).length > 0);
    }
  },
};
const jsonSchemaTransform = createJsonSchemaTransform({ zodToJsonConfig });
const jsonSchemaTransformObject = createJsonSchemaTransformObject({ zodToJsonConfig });
type Document = Partial<OpenAPIV3_1.Document>;
type Operation = OpenAPIV3_1.OperationObject;

/** The transform completes an OpenAPI 3.1 document (`swaggerOptions.openapi`); another would be left as it is. */
const isOpenApi31 = (doc: ReturnType<SwaggerTransformObject>): doc is Document =>
  'openapi' in doc && typeof doc.openapi === 'string' && doc.openapi.startsWith('3.1.');

const isMethod = oneOf(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']);

/** The routes of @fastify/swagger-ui (hidden by it), documented here: url → schema (already JSON Schema). */
function docsRoute(url: string): { schema: FastifySchema; url: string } | null {
  const page = (summary: string, operationId: string, type: string) => ({
    summary,
    operationId,
    tags: ['docs'],
    security: [],
    response: { 200: { description: 'OK', content: { [type]: { schema: { type: 'string' } } } } },
  });
  const staticFiles = page("The OpenAPI UI's static files", 'getDocsStaticFile', 'application/octet-stream');
  switch (url) {
    case '/docs':
    case '/docs/':
      return { url: '/docs', schema: page('The OpenAPI UI', 'getDocsUi', 'text/html') };
    case '/docs/json':
      return {
        url,
        schema: {
          summary: 'This OpenAPI document (JSON)',
          operationId: 'getOpenApiJson',
          tags: ['docs'],
          security: [],
          response: {
            200: { description: 'OK', content: { 'application/json': { schema: { type: 'object' } } } },
          },
        },
      };
    case '/docs/yaml':
      return { url, schema: page('This OpenAPI document (YAML)', 'getOpenApiYaml', 'application/x-yaml') };
    case '/docs/static/*':
      return {
        url: '/docs/static/{path}',
        schema: {
          ...staticFiles,
          // @fastify/static's answers: a range (206, 416), a precondition (304, 412); a path that names no file falls
          // through to the not-found handler (404 `route_not_found`). Its refusals are in the envelope.
          response: {
            ...staticFiles.response,
            206: {
              description: 'Partial Content: the `Range` asked for',
              content: { 'application/octet-stream': { schema: { type: 'string' } } },
            },
            304: { description: 'Not Modified' },
            404: { description: 'Not Found', content: staticRefusal(404) },
            412: {
              description: 'Precondition Failed (`If-Match`, `If-Unmodified-Since`)',
              content: staticRefusal(412),
            },
            416: { description: 'Range Not Satisfiable', content: staticRefusal(416) },
          },
          params: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
        },
      };
    default:
      // The UI's fixed files under /docs/static/ are the route above again.
      return url.startsWith('/docs') ? { url, schema: { hide: true } } : null;
  }
}

/** `x-internal`: the audience (OWASP API9), a service for a team's own backends, not a public API. */
const server: OpenAPIV3_1.ServerObject & { 'x-internal': boolean } = {
  url: '{scheme}://{host}',
  description:
    'The service: local by default (127.0.0.1:3000); in staging or production, where it is deployed',
  'x-internal': true,
  variables: {
    scheme: { default: 'http', enum: ['http', 'https'] },
    host: { default: '127.0.0.1:3000', description: 'host and port' },
  },
};

export const swaggerOptions: FastifyDynamicSwaggerOptions = {
  openapi: {
    openapi: '3.1.0',
    info: {
      title: 'Tool-runner sessions',
      version: API_VERSION,
      description,
      license: { name: 'UNLICENSED', identifier: 'UNLICENSED' },
    },
    servers: [server],
    tags,
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description: "An API key of API_KEYS (`tenant:key`); sessions are the key's tenant's.",
        },
      },
    },
    security: [{ bearer: [] }],
  },
  transform: ({ schema, url, route, ...rest }) => {
    const docs = docsRoute(url);
    if (docs) return docs;
    // @fastify/websocket hides its routes; the upgrade is part of the API.
    let s = 'websocket' in route && route.websocket === true ? { ...schema, hide: false } : schema;
    // A route of another method than POST that honours Idempotency-Key (its config, src/plugins/idempotency.ts):
    // marked for `completeOperation`, which documents the header on it as on every POST.
    if (route.config?.idempotencyKey === true) s = Object.assign({}, s, { [KEYED]: true });
    return jsonSchemaTransform({ schema: s, url, route, ...rest });
  },
  transformObject: (doc) => {
    const out = jsonSchemaTransformObject(doc);
    if (!isOpenApi31(out)) return out;
    const components: OpenAPIV3_1.ComponentsObject = {
      ...out.components,
      headers,
      parameters: { ...out.components?.parameters, ...parameters },
    };
    const paths: OpenAPIV3_1.PathsObject = Object.fromEntries(
      Object.entries(out.paths ?? {}).map(([path, item]) => [namedWildcard(path), item]),
    );
    for (const [path, item] of Object.entries(paths)) {
      if (!item) continue;
      // Every GET answers HEAD too (said in the description); the static files' route declares both.
      delete item.head;
      for (const method of Object.keys(item)) {
        const op = isMethod(method) ? item[method] : undefined;
        if (!op) continue;
        for (const p of op.parameters ?? [])
          if (!('$ref' in p) && p.in === 'path' && p.name === '*') p.name = 'path';
        completeOperation(path, method, op);
      }
    }
    components.schemas = usedSchemas({ ...out, paths, components });
    out.components = components;
    out.paths = paths;
    return out;
  },
};

/**
 * The schemas the document refers to. The type provider emits every registered schema twice (`X` for responses,
 * `XInput` for requests); the response schemas are never requests, so most `…Input` copies are unused.
 */
function usedSchemas(
  doc: Document & { components: OpenAPIV3_1.ComponentsObject },
): Record<string, OpenAPIV3_1.SchemaObject> {
  const all = doc.components.schemas ?? {};
  const used = new Set<string>();
  const visit = (value: unknown) => {
    const text = JSON.stringify(value);
    for (const m of text.matchAll(/"#\/components\/schemas\/([^"]+)"/g)) {
      const name = m[1]!;
      if (used.has(name)) continue;
      used.add(name);
      visit(all[name]);
    }
  };
  visit({ ...doc, components: { ...doc.components, schemas: {} } });
  return Object.fromEntries(Object.entries(all).filter(([name]) => used.has(name)));
}

/**
 * A route's trailing wildcard (`/v1/memory/*`, which @fastify/swagger writes `{*}`) as a parameter named `path`:
 * OpenAPI names parameters, and its value may hold slashes (said in the parameter's description).
 */
const namedWildcard = (path: string) => (path.endsWith('/{*}') ? `${path.slice(0, -3)}{path}` : path);

/** Resources whose answers carry their revision in `ETag` (a ToolByName when it is a tenant tool). */
const ETAGGED = new Set(
  [
    'Session',
    'MutatedSession',
    'Webhook',
    'CreatedWebhook',
    'Schedule',
    'TenantTool',
    'ToolByName',
    'McpServer',
  ].map((name) => `#/components/schemas/${name}`),
);

/**
 * Answers that carry @fastify/rate-limit's headers: those of the mutating /v1 routes (reads are not counted) that
 * pass its preHandler hook, so not the refusals of auth (401, 403) or of body parsing and validation (400, 413, 415).
 */
const RATE_LIMITED = (path: string, method: string, status: string) =>
  path.startsWith('/v1/') &&
  method !== 'get' &&
  (status.startsWith('2') || ['404', '409', '410', '412', '422', '429'].includes(status));

const ref = (kind: string, name: string) => ({ $ref: `#/components/${kind}/${name}` });

/**
 * The mark `transform` puts on the schema of a route that honours `Idempotency-Key` though it is no POST (an `x-`
 * key: @fastify/swagger copies those to the operation); `completeOperation` takes it off.
 */
const KEYED = 'x-idempotency-key';

/** The envelope of a 403 (its codes: `scope_denied`, `origin_not_allowed`), registered for the 403 added below. */
const forbidden = errors(403)[403];
const invalid = errors(400)[400];
const misdirected = errors(421)[421];
const tooMany = errors(429)[429];
/** The refusals of /docs/static: a path that names no file, a precondition, a range (src/plugins/errors.ts). */
const staticRefusals = routeErrors(
  { 404: ['route_not_found'], 412: ['invalid_request'], 416: ['invalid_request'] },
  404,
  412,
  416,
);
const staticRefusal = (status: 404 | 412 | 416) => ({
  'application/json': { schema: ref('schemas', String(staticRefusals[status].meta()?.id)) },
});

function completeOperation(path: string, method: string, op: Operation & { [KEYED]?: boolean }): void {
  const keyed = (method === 'post' && path.startsWith('/v1/')) || op[KEYED] === true;
  delete op[KEYED];
  if (keyed) {
    op.parameters = [...(op.parameters ?? []), ref('parameters', 'IdempotencyKey')];
  }
  // Every GET answers a WebSocket upgrade it does not take with 400 `invalid_request` (src/plugins/ws-handshake.ts),
  // before its own handler, whatever else it answers; and every route an HTTP/1.1 request without `Host`
  // (src/plugins/edge-errors.ts: every other operation declares a 400 of its own).
  if (method === 'get' && op.responses && !op.responses['400'])
    op.responses['400'] = {
      description:
        'Invalid request: an HTTP/1.1 request without `Host`, or a WebSocket upgrade of a route that does not ' +
        'upgrade (`invalid_request`).',
      content: { 'application/json': { schema: ref('schemas', String(invalid.meta()?.id)) } },
    };
  // Open mode (no API_KEYS) answers only loopback `Host` values: anything else, on any route, 421 `host_not_allowed`
  // (src/plugins/cors.ts).
  if (op.responses && !op.responses['421'])
    op.responses['421'] = {
      description:
        'Misdirected Request: without API_KEYS, a `Host` that is not loopback (`host_not_allowed`).',
      content: { 'application/json': { schema: ref('schemas', String(misdirected.meta()?.id)) } },
    };
  // A tenant whose clients leave too many answer bytes unread gets 429 `quota_exceeded` on any /v1 GET
  // (src/plugins/write-guard.ts).
  if (method === 'get' && path.startsWith('/v1/') && op.responses && !op.responses['429'])
    op.responses['429'] = {
      description: statusText['429'] ?? 'Too Many Requests',
      content: { 'application/json': { schema: ref('schemas', String(tooMany.meta()?.id)) } },
    };
  // A client token is refused with 403 `scope_denied` on any /v1 route outside its scopes.
  const unauthorized = op.responses?.['401'];
  if (path.startsWith('/v1/') && op.responses && unauthorized && !op.responses['403'])
    op.responses['403'] = {
      description: statusText['403']!,
      content: { 'application/json': { schema: ref('schemas', String(forbidden.meta()?.id)) } },
    };
  for (const [status, res] of Object.entries(op.responses ?? {})) {
    if ('$ref' in res) continue;
    if (!res.description || res.description === 'Default Response') {
      res.description = statusText[status] ?? 'Answer';
    }
    const hs: Record<string, OpenAPIV3_1.ReferenceObject> = {};
    const body = res.content?.['application/json']?.schema;
    const bodyRef = body && '$ref' in body ? body.$ref : undefined;
    if (typeof bodyRef === 'string' && ETAGGED.has(bodyRef)) hs['ETag'] = ref('headers', 'ETag');
    if (keyed && status.startsWith('2')) {
      hs['Idempotent-Replayed'] = ref('headers', 'IdempotentReplayed');
    }
    if (RATE_LIMITED(path, method, status)) {
      hs['X-RateLimit-Limit'] = ref('headers', 'RateLimitLimit');
      hs['X-RateLimit-Remaining'] = ref('headers', 'RateLimitRemaining');
      hs['X-RateLimit-Reset'] = ref('headers', 'RateLimitReset');
    }
    if (status === '429' || status === '503') hs['Retry-After'] = ref('headers', 'RetryAfter');
    if (status === '200' && path.startsWith('/v1/chat') && res.content?.['text/event-stream'])
      hs['x-vercel-ai-ui-message-stream'] = ref('headers', 'UiMessageStream');
    if (status === '401') hs['WWW-Authenticate'] = ref('headers', 'WwwAuthenticate');
    if (Object.keys(hs).length > 0) res.headers = { ...res.headers, ...hs };
  }
}
