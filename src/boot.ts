import type { TracerProvider } from '@opentelemetry/api';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import path from 'node:path';
import type { FastifyBaseLogger as Logger } from 'fastify';
import { listenWide } from './accept-sockets.js';
import app from './app.js';
import { loadConfig, isLoopback, type Config } from './config.js';
import { offlineFetch } from './offline/fetch.js';
import { findRedisServerBinary, redisAnswers, startEmbeddedRedis } from './redis/embedded.js';
import { componentLog, skipRedactionOfPrimitives } from './log.js';
import { ProviderError, providerOptions } from './providers.js';
import { checkExpectation, clientErrorHandler, frameworkErrors, requestId } from './plugins/edge-errors.js';

export const loggerOptions = (config: Config) => ({
  level: config.LOG_LEVEL,
  redact: {
    paths: [
      'req.headers.authorization',
      'req.headers["x-api-key"]',
      'req.headers["sec-websocket-protocol"]',
      'headers.authorization',
      '*.apiKey',
      '*.ANTHROPIC_API_KEY',
      '*.AWS_SECRET_ACCESS_KEY',
      '*.AWS_SESSION_TOKEN',
      '*.AWS_BEARER_TOKEN_BEDROCK',
      '*.ANTHROPIC_VERTEX_ACCESS_TOKEN',
      '*.secretAccessKey',
      '*.sessionToken',
      '*.accessToken',
      '*.API_KEYS',
      // Client tokens (spec §7.2) should a body or an object holding one ever be logged.
      '*.token',
      // MCP servers' header values (tokens, after `${ENV}` substitution): src/mcp/config.ts.
      'MCP_SERVERS',
      '*.MCP_SERVERS',
    ],
    censor: '[redacted]',
  },
});

export interface Service {
  app: FastifyInstance;
  url: string;
  config: Config;
  /** Stops taking runs, lets running turns finish within the grace period, closes Redis and embedded helpers. */
  close(): Promise<void>;
}

export class BootError extends Error {}

/** Where Redis is: REDIS_URL (must answer), else 127.0.0.1:6379 if it answers, else an embedded redis-server. */
async function resolveRedis(
  config: Config,
  log: Logger,
): Promise<{ url?: string; stop?: () => Promise<void> }> {
  if (config.REDIS_CLUSTER_NODES?.length) {
    // A cluster: some seed node must answer now; the redis plugin then waits for the whole cluster to be ready.
    const nodes = config.REDIS_CLUSTER_NODES;
    const answers = await Promise.all(
      nodes.map((n) =>
        redisAnswers(`redis://${n.host.includes(':') ? `[${n.host}]` : n.host}:${n.port}`, 3000),
      ),
    );
    if (!answers.some(Boolean)) {
      throw new BootError(
        `REDIS_CLUSTER_NODES: no node answers (${nodes.map((n) => `${n.host}:${n.port}`).join(', ')}; checked for 3 s).`,
      );
    }
    return {};
  }
  if (config.REDIS_URL) {
    if (!(await redisAnswers(config.REDIS_URL, 3000))) {
      throw new BootError(`REDIS_URL: no Redis answers at ${redactUrl(config.REDIS_URL)} (checked for 3 s).`);
    }
    return { url: config.REDIS_URL };
  }
  const local = config.LOCAL_REDIS_URL;
  if (await redisAnswers(local, 500)) {
    log.info({ redis: redactUrl(local) }, 'using the local Redis server (set REDIS_URL to choose another)');
    return { url: local };
  }
  if (!findRedisServerBinary()) {
    throw new BootError(
      `No Redis: REDIS_URL is unset, nothing answers at ${redactUrl(local)}, and no redis-server is installed.\n` +
        '  Either run `docker compose up` (Redis included), or install Redis (Debian/Ubuntu: `sudo apt-get install redis-server`; ' +
        'macOS: `brew install redis`), or set REDIS_URL.',
    );
  }
  const dataDir = path.resolve(config.DATA_DIR, 'redis');
  const embedded = await startEmbeddedRedis({ dataDir, logger: log });
  log.warn(
    { redis: embedded.url, dataDir },
    'started an embedded redis-server (append-only, stopped with the service)',
  );
  return { url: embedded.url, stop: embedded.stop };
}

function redactUrl(u: string): string {
  try {
    const url = new URL(u);
    if (url.password) url.password = '***';
    return url.toString();
  } catch {
    return '(unparseable)';
  }
}

export interface ServiceExtras {
  /** Spans go to this provider instead of one configured from `OTEL_*` (tests, embedding). */
  tracerProvider?: TracerProvider;
}

export async function startService(
  env: NodeJS.ProcessEnv = process.env,
  extras: ServiceExtras = {},
): Promise<Service> {
  const config = loadConfig(env);
  const fastify = Fastify({
    logger: loggerOptions(config),
    bodyLimit: config.BODY_LIMIT,
    // A client's x-request-id only when well-formed (see edge-errors.ts); echoed on every answer (errors plugin).
    requestIdHeader: false,
    genReqId: requestId,
    frameworkErrors,
    clientErrorHandler,
    // src/plugins/access-log.ts writes one line per request, with the route and tenant; Fastify's own two lines
    // (`incoming request` as it arrives, `request completed`) are added at debug and below.
    logController: new LogController({
      disableRequestLogging: config.LOG_LEVEL !== 'debug' && config.LOG_LEVEL !== 'trace',
      // Fields are snake_case across the log (`tool_use_id`, `upstream_request_id`, …): not Fastify's `reqId`.
      requestIdLogLabel: 'request_id',
    }),
    forceCloseConnections: true,
    // Slow clients: a whole request within REQUEST_TIMEOUT_MS, no silent socket (idle keep-alive included) beyond
    // CONNECTION_TIMEOUT_MS. Node checks the request deadline every `connectionsCheckingInterval` (its default is
    // 30 s: far too coarse). Both deadlines go to http.createServer itself: Fastify sets `requestTimeout` only after
    // the server is built, when Node has already fixed `headersTimeout` at its 60 s default, and that is the deadline
    // Node applied to a trickled body (cut at 60 s, not 30: test/quotas/limits.test.ts).
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    connectionTimeout: config.CONNECTION_TIMEOUT_MS,
    keepAliveTimeout: config.CONNECTION_TIMEOUT_MS,
    http: {
      connectionsCheckingInterval: Math.min(1000, Math.ceil(config.REQUEST_TIMEOUT_MS / 4)),
      requestTimeout: config.REQUEST_TIMEOUT_MS,
      headersTimeout: config.REQUEST_TIMEOUT_MS,
      // An HTTP/1.1 request without `Host` reaches the app, which refuses it in the error envelope
      // (edge-errors.ts, `hostRequired`), instead of Node's bare 400.
      requireHostHeader: false,
    },
    // Any parameter a request line can carry (Node's header limit, 16 KiB, bounds the URL): the routes' schemas
    // give the 400 for one too long (a tool name past 64 characters), where the router would answer an unrouted 404.
    routerOptions: { maxParamLength: 16_384 },
  });
  // Before any child logger writes: the same lines, without the redactor's work on strings and numbers (log.ts).
  skipRedactionOfPrimitives(fastify.log);
  // An `Expect` other than 100-continue: answered 417 in the error envelope (edge-errors.ts), not Node's bare 417.
  fastify.server.on('checkExpectation', checkExpectation(fastify.log));
  const log = componentLog(fastify.log, 'boot');
  const cleanups: Array<() => Promise<void>> = [];
  try {
    const redis = await resolveRedis(config, log);
    if (redis.stop) cleanups.push(redis.stop);

    const cloud = providerOptions(config);
    const offline = !cloud && !config.ANTHROPIC_API_KEY;
    if (offline) {
      log.warn(
        { model: 'offline' },
        'ANTHROPIC_API_KEY is not set: turns are answered by the built-in OFFLINE model (a scripted fake), not by Claude',
      );
    }
    if (!config.API_KEYS) {
      log.warn(
        { host: config.HOST },
        'API_KEYS is not set: the API is open to anyone who can reach this loopback address',
      );
    }
    await fastify.register(app, {
      config,
      redisUrl: redis.url,
      anthropic:
        cloud ??
        (offline
          ? {
              provider: 'anthropic',
              apiKey: 'offline',
              fetch: offlineFetch({ eventDelayMs: config.OFFLINE_EVENT_DELAY_MS }),
              offline: true,
            }
          : {
              provider: 'anthropic',
              apiKey: config.ANTHROPIC_API_KEY!,
              baseURL: config.ANTHROPIC_BASE_URL,
              offline: false,
            }),
      tracing: { env, provider: extras.tracerProvider },
    });
    await listenWide(fastify, {
      port: config.PORT,
      host: config.HOST,
      sockets: config.ACCEPT_SOCKETS,
      maxConnections: config.MAX_CONNECTIONS,
    });
  } catch (err) {
    await fastify.close().catch(() => {});
    for (const c of cleanups.reverse()) await c().catch(() => {});
    if (err instanceof Error && /Redis Cluster was not ready/.test(err.message))
      throw new BootError(err.message);
    if (err instanceof ProviderError) throw new BootError(err.message);
    throw err;
  }
  const addr = fastify.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.PORT;
  const host = isLoopback(config.HOST) || config.HOST === '0.0.0.0' ? '127.0.0.1' : config.HOST;
  return {
    app: fastify,
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    config,
    close: async () => {
      await fastify.close();
      for (const c of cleanups.reverse()) await c().catch(() => {});
    },
  };
}
