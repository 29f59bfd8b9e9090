import type { FastifyPluginAsync, FastifyRequest, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import websocket from '@fastify/websocket';
import { validatorCompiler } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { streamsQuota, type Config } from './config.js';
import { badRequest, NotFound } from './errors.js';
import {
  DEFAULT_JSON_MAX_DEPTH,
  DEFAULT_JSON_MAX_KEYS,
  forbiddenKeyDetails,
  forbiddenKeyPath,
  isBlank,
  jsonScan,
  tooDeepMessage,
  tooWideMessage,
} from './json-depth.js';
import { loneSurrogateDetails, loneSurrogateMessage, loneSurrogatePath } from './json-unicode.js';
import { heavyStep } from './tenant-turns.js';
import redisPlugin from './plugins/redis.js';
import anthropicPlugin from './plugins/anthropic.js';
import type { ProviderOptions } from './providers.js';
import enginePlugin from './plugins/engine.js';
import mcpPlugin from './mcp/plugin.js';
import eventsHubPlugin from './plugins/events-hub.js';
import authPlugin, { UNROUTED } from './plugins/auth.js';
import browserOriginsPlugin from './plugins/cors.js';
import errorsPlugin from './plugins/errors.js';
import contentEncodingPlugin from './plugins/content-encoding.js';
import accessLogPlugin from './plugins/access-log.js';
import idempotencyPlugin from './plugins/idempotency.js';
import rateLimitPlugin from './plugins/ratelimit.js';
import securityHeadersPlugin from './plugins/security-headers.js';
import healthRoutes from '../routes/health.js';
import sessionRoutes from '../routes/sessions.js';
import toolCallRoutes from '../routes/tool-calls.js';
import controlRoutes from '../routes/control.js';
import toolRoutes from '../routes/tools.js';
import eventRoutes from '../routes/events.js';
import streamRoutes from '../routes/stream.js';
import consoleRoutes from '../routes/console.js';
import webhooksPlugin from './webhooks/plugin.js';
import webhookRoutes from '../routes/webhooks.js';
import memoryRoutes from '../routes/memory.js';
import chatRoutes from '../routes/chat.js';
import mcpServerRoutes from '../routes/mcp-servers.js';
import schedulesPlugin from './schedules/plugin.js';
import scheduleRoutes from '../routes/schedules.js';
import agentsPlugin from './agents/plugin.js';
import agentRoutes from '../routes/agents.js';
import tenantToolRoutes from '../routes/tenant-tools.js';
import toolTaskRoutes from '../routes/tool-tasks.js';
import usageRoutes from '../routes/usage.js';
import clientTokenRoutes from '../routes/client-tokens.js';
import quotasPlugin from './quotas/quotas.js';
import { selectProtocol } from './events/protocols.js';
import { metricsPlugin, tracingPlugin, type TracingPluginOptions } from './observability/plugin.js';
import { swaggerOptions } from './openapi/document.js';
import { checkedSerializer } from './openapi/serializer.js';
import { servedDocument } from './openapi/served.js';
import writeGuardPlugin from './plugins/write-guard.js';
import { configureNameResolver } from './webhooks/name-resolver.js';
import wsHandshakePlugin from './plugins/ws-handshake.js';
import { hostRequired } from './plugins/edge-errors.js';

export interface AppOptions {
  config: Config;
  /** Where Redis is (resolved at boot: REDIS_URL, a server on 6379, or the embedded one). */
  redisUrl?: string | undefined;
  /** The upstream: the real API (or Bedrock, Vertex), or the offline model (its `fetch`). */
  anthropic: ProviderOptions;
  /** OpenTelemetry: a provider to use, or the environment to configure one from (`OTEL_*`; off by default). */
  tracing?: TracingPluginOptions;
}

/** Bytes of a JSON body from which its scan and parse are a heavy step of its tenant's (tenant-turns.ts). */
const HEAVY_BODY_BYTES = 64 * 1024;

/** The whole service as one Fastify plugin; `src/server.ts` only boots it. */
const app: FastifyPluginAsync<AppOptions> = async (fastify, opts) => {
  const { config } = opts;
  configureNameResolver({
    timeoutMs: config.OUTBOUND_DNS_TIMEOUT_MS,
    servers: config.OUTBOUND_DNS_SERVERS,
    search: config.OUTBOUND_DNS_SEARCH,
  });
  fastify.setValidatorCompiler(validatorCompiler);
  fastify.setSerializerCompiler(
    checkedSerializer(
      config.RESPONSE_CHECK_MAX_BYTES ?? (process.env['NODE_ENV'] === 'production' ? 65_536 : Infinity),
    ),
  );
  // An empty JSON body reads as no body (routes without one accept that), else JSON.parse (Fastify's parser only
  // answers malformed text). Nesting and the keys of each object are bounded before the parse, and prototype keys
  // refused after it (400 `invalid_request`).
  const jsonParser = fastify.getDefaultJsonParser('error', 'error');
  // JSON only: Fastify's default text/plain parser is removed too, so a text body (a CORS "simple" request a page
  // may send without a preflight) is 415 `unsupported_media_type`, as any other content type.
  fastify.removeContentTypeParser(['application/json', 'text/plain']);
  // `fatal`: bytes that are not UTF-8 throw; `ignoreBOM`: a leading BOM stays in the text (skipped below).
  const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  /** The body's JSON (`bytes`, not blank) to `done`, or its 400. */
  const parseJson = (
    req: FastifyRequest,
    bytes: Buffer,
    done: (err: Error | null, body?: unknown) => void,
  ) => {
    const { breach, suspectKeys } = jsonScan(bytes, DEFAULT_JSON_MAX_DEPTH, DEFAULT_JSON_MAX_KEYS);
    if (breach === 'depth')
      return done(
        badRequest(tooDeepMessage(DEFAULT_JSON_MAX_DEPTH), { max_depth: DEFAULT_JSON_MAX_DEPTH }),
        undefined,
      );
    if (breach === 'keys')
      return done(
        badRequest(tooWideMessage(DEFAULT_JSON_MAX_KEYS), { max_keys: DEFAULT_JSON_MAX_KEYS }),
        undefined,
      );
    // UTF-8 or refused: `toString` would make each byte that is not UTF-8 a U+FFFD, stored as if sent.
    let text: string;
    try {
      text = utf8.decode(bytes);
    } catch {
      return done(
        badRequest('The request body is not UTF-8.', [
          { path: '', code: 'invalid_utf8', message: 'The body holds bytes that are not UTF-8.' },
        ]),
        undefined,
      );
    }
    let value: unknown;
    try {
      // A leading BOM is skipped, as Fastify's parser (secure-json-parse) does.
      value = JSON.parse(text.charCodeAt(0) === 0xfeff ? text.slice(1) : text);
    } catch {
      // Malformed text: Fastify's parser gives its answer (400 `invalid_json`).
      return jsonParser(req, text, (err) => done(err ?? badRequest('The request body is not valid JSON.')));
    }
    // A key that could poison a prototype (`__proto__`, `constructor.prototype`, however escaped) is refused with
    // its path, on every route alike. Only a body whose scan found a suspect key is walked (the scan looked at every
    // key), so any other body costs JSON.parse alone.
    const forbidden = suspectKeys ? forbiddenKeyPath(value) : null;
    if (forbidden !== null)
      return done(badRequest('The body holds a forbidden key.', forbiddenKeyDetails(forbidden)), undefined);
    const illFormed = loneSurrogatePath(bytes, value);
    if (illFormed !== null)
      return done(badRequest(loneSurrogateMessage, loneSurrogateDetails(illFormed)), undefined);
    done(null, value);
  };
  // The body as bytes: a refused body is never decoded to a string (the scan reads bytes, see json-depth.ts).
  fastify.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    const bytes = typeof body === 'string' ? Buffer.from(body) : body;
    if (isBlank(bytes)) return done(null, undefined);
    // A large body (its scan and parse: ~1–5 ms of the loop per MiB) is one heavy step of its tenant's: one per
    // turn of the loop (tenant-turns.ts), so a tenant's bodies that ended together are not all parsed in one turn.
    if (bytes.length >= HEAVY_BODY_BYTES) {
      const wait = heavyStep(req.tenant ?? '');
      if (wait)
        return void wait.then(() => parseJson(req, bytes, done)).catch((err: Error) => done(err, undefined));
    }
    parseJson(req, bytes, done);
  });

  await fastify.register(errorsPlugin);
  await fastify.register(contentEncodingPlugin);
  await fastify.register(accessLogPlugin);
  await fastify.register(metricsPlugin, { tenantLabel: config.METRICS_TENANT_LABEL });
  await fastify.register(tracingPlugin, opts.tracing ?? {});
  await fastify.register(swagger, swaggerOptions);
  await fastify.register(swaggerUi, {
    routePrefix: '/docs',
    uiHooks: { onRequest: servedDocument(fastify) },
  });
  await fastify.register(securityHeadersPlugin, {
    contentSecurityPolicy: { directives: cspDirectives(fastify.swaggerCSP) },
  });
  await fastify.register(redisPlugin, {
    url: opts.redisUrl,
    clusterNodes: config.REDIS_CLUSTER_NODES,
    keyPrefix: config.REDIS_KEY_PREFIX,
  });
  await fastify.register(anthropicPlugin, {
    provider: opts.anthropic,
    maxRetries: config.UPSTREAM_MAX_RETRIES,
    timeoutMs: config.UPSTREAM_TIMEOUT_MS,
    idleMs: config.UPSTREAM_IDLE_MS,
  });
  await fastify.register(mcpPlugin, { config });
  await fastify.register(enginePlugin, {
    leaseTtlMs: config.LEASE_TTL_MS,
    store: {
      eventLogMax: config.EVENT_LOG_MAX,
      eventLogMaxBytes: config.EVENT_LOG_MAX_BYTES,
      maxTurnBytes: config.MAX_TURN_BYTES,
      tenantMaxActiveRuns: config.TENANT_MAX_ACTIVE_RUNS,
      tenantMaxBytes: config.TENANT_MAX_BYTES,
      modelPrices: config.MODEL_PRICES,
      tenantMaxCostUsdPerDay: config.TENANT_MAX_COST_USD_PER_DAY,
      usageRetentionDays: config.USAGE_RETENTION_DAYS,
      sessionTtlS: config.SESSION_TTL_S,
      actionTimeoutMinS: config.ACTION_TIMEOUT_MIN_S,
      deletedLogTtlMs: config.DELETED_LOG_TTL_MS,
    },
    deadlineSweepMs: config.DEADLINE_SWEEP_MS,
    shutdownGraceMs: config.SHUTDOWN_GRACE_MS,
    maxActiveRuns: config.MAX_ACTIVE_RUNS,
    memory: {
      maxFileBytes: config.MEMORY_MAX_FILE_BYTES,
      maxTenantBytes: config.MEMORY_MAX_TENANT_BYTES,
      maxFiles: config.MEMORY_MAX_FILES,
    },
    toolResultMaxBytes: config.TOOL_RESULT_MAX_BYTES,
    tenantTools: {
      leaseMs: config.TOOL_TASK_LEASE_MS,
      maxTools: config.TENANT_MAX_TOOLS,
      maxTasks: config.TOOL_TASKS_MAX_PER_TENANT,
      claimMaxBytes: config.TOOL_TASK_CLAIM_MAX_BYTES,
      maxWaitingClaims: config.TOOL_TASK_MAX_WAITING_CLAIMS,
      maxResultBytes: config.TOOL_RESULT_MAX_BYTES,
    },
  });
  await fastify.register(eventsHubPlugin, {
    pageBytes: config.REPLAY_PAGE_BYTES,
    tenantBufferedBytes: config.TENANT_MAX_STREAM_BUFFERED_BYTES,
  });
  // At the root, so before the /v1 scope's auth hook: @fastify/websocket's onRequest hook must see an upgrade first,
  // so that an upgrade refused by the auth hook (401) still has its socket destroyed, on every route.
  await fastify.register(websocket, {
    // Browsers authenticate with the subprotocols `bearer, <key>`: the server selects `bearer`, never the key.
    options: { maxPayload: 1_048_576, handleProtocols: selectProtocol },
    // On shutdown the hub ends every stream first (an `end` frame, then 1001 `shutting_down`: reconnect elsewhere)
    // rather than the plugin's bare close of each socket; then the server closes.
    preClose(done) {
      this.eventsHub.close();
      for (const client of this.websocketServer.clients) client.close(1001, 'shutting_down');
      this.websocketServer.close();
      done();
    },
  });
  // Right after it: a malformed handshake, or an upgrade on a route that is not a WebSocket, answers 400 in the
  // envelope (not ws's bare text, nor a handshake closed at once), after the key check.
  await fastify.register(wsHandshakePlugin);
  // Then an HTTP/1.1 request without `Host` is 400 `invalid_request` (Node's own check is off, src/boot.ts), before
  // the open mode's Host check below would answer it 421.
  await fastify.register(hostRequired);
  // At the root, before the /v1 scope: preflights are answered without a key, and a WebSocket from a foreign origin
  // is refused (403) before its key is read.
  await fastify.register(browserOriginsPlugin, { origins: config.CORS_ORIGINS, open: !config.API_KEYS });
  await fastify.register(v1Guard);
  await fastify.register(healthRoutes);
  await fastify.register(consoleRoutes);
  await fastify.register(webhooksPlugin, { config });
  await fastify.register(schedulesPlugin, { config });
  await fastify.register(agentsPlugin, { config });
  // The API: every /v1 route lives in this one encapsulated scope, whose hooks (key, rate limit, idempotency)
  // run for whatever the router matched, however the path was spelled. New /v1 routes are registered here.
  await fastify.register(async function v1(api) {
    api.addHook('onRoute', (route) => {
      authenticated.add(route);
      // A route that declares no query takes none (the catch-all below answers 404 whatever its query).
      if (route.url !== UNROUTED) route.schema = { querystring: noQuery, ...route.schema };
    });
    // A DELETE takes no body (docs/API.md): one sent anyway is refused, as an unknown field is, not ignored. None,
    // `null` and `{}` are no body.
    api.addHook('preValidation', async (req) => {
      if (req.method === 'DELETE' && !isNoBody(req.body))
        throw badRequest('A DELETE takes no body.', [
          { path: '/', code: 'unrecognized_keys', message: 'DELETE takes no body' },
        ]);
    });
    await api.register(authPlugin, { keys: config.API_KEYS });
    await api.register(rateLimitPlugin, {
      perMinute: config.RATE_LIMIT_PER_MIN,
      tokenPerMinute: config.CLIENT_TOKEN_RATE_LIMIT_PER_MIN,
      ingestBytesPerMinute: config.TENANT_MAX_INGEST_BYTES_PER_MIN,
    });
    await api.register(quotasPlugin, {
      maxSessions: config.TENANT_MAX_SESSIONS,
      streams: streamsQuota(config),
      tokenMaxStreams: config.CLIENT_TOKEN_MAX_STREAMS,
    });
    await api.register(writeGuardPlugin, {
      writeTimeoutMs: config.RESPONSE_WRITE_TIMEOUT_MS,
      tenantMaxBytes: config.TENANT_MAX_BUFFERED_BYTES,
      connectionMaxBytes: config.CONNECTION_MAX_BUFFERED_BYTES,
      heavyReadsAtOnce: config.TENANT_HEAVY_READS,
    });
    await api.register(idempotencyPlugin, {
      ttlS: config.IDEMPOTENCY_TTL_S,
      maxBytesPerTenant: config.IDEMPOTENCY_MAX_BYTES_PER_TENANT,
      box: fastify.webhooks.box,
    });
    await api.register(toolRoutes);
    // In this order: the OpenAPI document lists paths in registration order (see routes/sessions.ts).
    await api.register(sessionRoutes);
    await api.register(toolCallRoutes);
    await api.register(controlRoutes);
    await api.register(eventRoutes, { config });
    await api.register(streamRoutes, { config });
    await api.register(webhookRoutes);
    await api.register(memoryRoutes);
    await api.register(chatRoutes, { config });
    await api.register(mcpServerRoutes);
    await api.register(scheduleRoutes);
    await api.register(agentRoutes);
    await api.register(tenantToolRoutes);
    await api.register(toolTaskRoutes, { config });
    await api.register(usageRoutes);
    await api.register(clientTokenRoutes);
    // Unknown paths under /v1 are answered inside the scope too: 401 without a key, as any /v1 route (no route
    // discovery without one), else 404 `route_not_found`. Preflights (OPTIONS) are left to the CORS plugin. The 404
    // is thrown once the key is checked (the scope's onRequest hooks run first), before anything is read or counted:
    // no body read, no rate window or byte budget written.
    const unrouted = async (req: FastifyRequest) => {
      throw new NotFound('route', `No route ${req.method} ${req.url.split('?')[0]}.`);
    };
    api.route({
      method: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
      url: UNROUTED,
      schema: { hide: true },
      onRequest: unrouted,
      handler: unrouted,
    });
  });
};

/**
 * Helmet's default policy (same-origin scripts, styles, images, fetch and WebSocket) plus the inline scripts Swagger
 * UI publishes hashes for. No `upgrade-insecure-requests`: the service is often reached over plain HTTP on loopback.
 * The console's page sets its own, stricter policy (routes/console.ts), which replaces this one.
 */
function cspDirectives(swaggerCsp: { script: string[] }) {
  return {
    scriptSrc: ["'self'", ...swaggerCsp.script],
    // No style hashes: with one, browsers ignore 'unsafe-inline' (Swagger UI's style attributes).
    styleSrc: ["'self'", "'unsafe-inline'"],
    connectSrc: ["'self'"],
    upgradeInsecureRequests: null,
  };
}

/** A parsed body that says nothing: none, `null`, or an empty object. */
const isNoBody = (body: unknown) =>
  body === undefined ||
  body === null ||
  (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length === 0);

/**
 * The query of a `/v1` route that declares none: every query is strict, as every body is, so a parameter a route
 * does not take (a misspelt `limt`, a filter it has not) is a 400 `invalid_request` naming it rather than ignored.
 */
const noQuery = z.strictObject({});

/** Route options of the routes registered inside the authenticated `/v1` scope (filled by its `onRoute` hook). */
const authenticated = new WeakSet<RouteOptions>();

/**
 * Refuses to boot when a route under `/v1` was registered outside the authenticated scope: such a route would answer
 * without a key. Checked at `onReady`, after every plugin registered its routes.
 */
const v1Guard = fp(
  async (fastify) => {
    const outside: string[] = [];
    fastify.addHook('onRoute', (route) => {
      // The scope's own onRoute hook runs after this one for the same options object: look once all have run.
      queueMicrotask(() => {
        if (/^\/v1(\/|$)/i.test(route.url) && !authenticated.has(route))
          outside.push(`${route.method} ${route.url}`);
      });
    });
    fastify.addHook('onReady', async () => {
      if (outside.length)
        throw new Error(
          `routes under /v1 registered outside the authenticated scope of app.ts: ${outside.join(', ')}`,
        );
    });
  },
  { name: 'v1-guard' },
);

export default fp(app, { name: 'toolrunner-sessions' });
