import fp from 'fastify-plugin';
import rateLimit from '@fastify/rate-limit';
import type { FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { QuotaExceeded } from '../errors.js';
import { TokenRate, tokenRateRefusal, type RateHit } from '../quotas/token-rate.js';
import { Transform, type Readable } from 'node:stream';
import { IngestBytes, type IngestRefusal } from '../quotas/ingest-bytes.js';
import { HttpRefusal } from './error-status.js';
import { rateStore, routeWindowPrefix } from '../quotas/rate-store.js';

/** `payload` as it is read, its byte count handed to `done` at its end. */
function countAsRead(payload: Readable, done: (bytes: number) => void): Transform {
  let n = 0;
  const counter = new Transform({
    transform(chunk: Buffer, _enc, next) {
      n += chunk.length;
      next(null, chunk);
    },
    flush(next) {
      if (n > 0) done(n);
      next();
    },
  });
  payload.on('error', (err) => counter.destroy(err));
  return payload.pipe(counter);
}

/** Reads (which include WebSocket upgrades) are never counted. */
const uncounted = (req: FastifyRequest) =>
  req.method === 'GET' || req.method === 'HEAD' || req.method === 'OPTIONS';

/** The length of every request window (ms): the tenant's, a token's, a route's own. */
const WINDOW_MS = 60_000;

/** The rate limiter's key of a tenant's request (`rl:` + it: the tenant's window). */
const tenantKey = (req: FastifyRequest) => `{${req.tenant}}`;

/** The window of the rate limiter (`@fastify/rate-limit`) that counts a route's requests: its key and max. */
interface LimiterWindow {
  key: (req: FastifyRequest) => string;
  max: number;
}

/** What a Redis Cluster hashes of `key`: the inside of its first `{…}` when not empty, else the whole key. */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  const close = open < 0 ? -1 : key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

/** The tenant of the request a route's own window's key is made for as the route is added (hashTag's check). */
const PROBE_TENANT = 'limiter-window-probe';

/**
 * The rate limiter's window of `route`: the tenant's (`rl:{tenant}`, `tenantMax`), or the route's own when its
 * `config.rateLimit` sets one (its key prefixed by its method and URL, as rate-store.ts's `child` makes it), or
 * null when the route is not limited (`rateLimit: false`). A route's own window must have a number for its max and
 * the tenant's window length, and its key the tenant's hash tag (`{tenant}`, the token window's: one script counts
 * both, lua/rate-hit-2.lua, and a Redis Cluster runs a script on keys of one slot); its key is made by a
 * synchronous `keyGenerator`, checked as the route is added on a request of a made-up tenant. Anything else is
 * refused as the route is added (thrown), rather than a token's request let past that window or failing in a
 * Cluster (CROSSSLOT, which the token's hook lets through as the limiter's failure).
 */
export function limiterWindow(route: RouteOptions, tenantMax: number): LimiterWindow | null {
  const own = (route.config as { rateLimit?: unknown } | undefined)?.rateLimit;
  if (own === false) return null;
  if (own == null) return { key: (req) => `rl:${tenantKey(req)}`, max: tenantMax };
  const o = own as { max?: unknown; timeWindow?: unknown; keyGenerator?: unknown; groupId?: unknown };
  const keyOf = (o.keyGenerator ?? tenantKey) as (req: FastifyRequest) => unknown;
  const max = o.max ?? tenantMax;
  const name = `${String(route.method)} ${route.url}`;
  if (typeof max !== 'number' || (o.timeWindow !== undefined && o.timeWindow !== WINDOW_MS))
    throw new Error(`${name}: a route's own rate window needs a numeric max and a ${WINDOW_MS} ms window`);
  const prefix = routeWindowPrefix('rl:', route);
  const group = typeof o.groupId === 'string' ? o.groupId : '';
  const key = (req: FastifyRequest) => `${prefix}${String(keyOf(req))}${group}`;
  let made: unknown;
  try {
    made = keyOf({ tenant: PROBE_TENANT } as FastifyRequest);
  } catch (err) {
    throw new Error(`${name}: a route's own rate window's keyGenerator fails on a tenant alone`, {
      cause: err,
    });
  }
  if (typeof (made as { then?: unknown } | null)?.then === 'function')
    throw new Error(`${name}: a route's own rate window needs a synchronous keyGenerator`);
  const probe = `${prefix}${String(made)}${group}`;
  if (hashTag(probe) !== PROBE_TENANT)
    throw new Error(
      `${name}: a route's own rate window's key must hold its tenant's hash tag, {tenant}, and only it (a client ` +
        `token's window is counted with it, in one slot of a Redis Cluster); for tenant ${PROBE_TENANT} it is ${probe}`,
    );
  return { key, max };
}

/** `hook` appended to `route`'s own preHandlers (after those it declares), as @fastify/rate-limit adds its own. */
function addPreHandler(
  route: RouteOptions,
  hook: (req: FastifyRequest, reply: FastifyReply) => Promise<void>,
) {
  const own = route.preHandler;
  route.preHandler = own === undefined ? [hook] : Array.isArray(own) ? [...own, hook] : [own, hook];
}

/**
 * `RATE_LIMIT_PER_MIN` mutating requests per tenant per minute, through `@fastify/rate-limit` with a Redis store of
 * ours (src/quotas/rate-store.ts: its Redis store's keys and fixed windows, one script per request, so the window
 * holds across replicas). Registered inside the authenticated `/v1` scope: the key is the tenant the auth hook set,
 * and only that scope's routes are counted, once admitted: a request refused before (no key, a schema 400, an
 * unknown path) counts nowhere, and one the limit refuses is counted in no window (it writes nothing: the window
 * neither grows nor lasts longer). Reads (GET/HEAD, which includes WebSocket upgrades) are not counted. Over the
 * limit: 429 `rate_limited` with `Retry-After` (seconds to the end of the window). A Redis error lets the request
 * through (the route then meets the store's own 503): the limiter never fails a request by itself.
 *
 * A client token (a browser's: untrusted) has a window of its own besides, `CLIENT_TOKEN_RATE_LIMIT_PER_MIN`
 * (src/quotas/token-rate.ts), so one page cannot use up its tenant's count and lock out the tenant's backend. A
 * token's request is counted in its window and the rate limiter's (its tenant's, or its route's own) by one script
 * — a route-level `preHandler` added to each route just before the rate limiter's, so after the idempotency check
 * as the tenant limiter counts a tenant key's request, and which the rate limiter then skips — in both or, refused
 * by either, in neither, with the rate limiter's headers and refusal.
 *
 * `TENANT_MAX_INGEST_BYTES_PER_MIN` (`ingestBytesPerMinute`, 0: off) bounds a tenant's request body bytes a minute,
 * across replicas (src/quotas/ingest-bytes.ts): checked in `preParsing`, from `Content-Length`, before the body is
 * read or parsed, so a refused body costs no parsing; a declared length past the route's body limit is not counted
 * (the parser answers 413 without reading), nor a body in a content type no parser takes (415, unread). A client token's bodies count in a window of its own too (a quarter of
 * the budget), so one page cannot use up its tenant's. Over either: 429 `rate_limited` with `Retry-After`. A body
 * sent without `Content-Length` (chunked) is counted as it is read, and so refuses only the requests after it.
 */
export default fp<{ perMinute: number; tokenPerMinute: number; ingestBytesPerMinute?: number }>(
  async (app, opts) => {
    const maxBytes = opts.ingestBytesPerMinute ?? 0;
    if (maxBytes > 0) {
      const bytes = new IngestBytes(app.redis, maxBytes);
      /**
       * Whether Fastify has a parser for `req`'s body: without one (no content type, or one not JSON: app.ts) it
       * answers 415 `unsupported_media_type` without reading the body, after this hook. The service's parsers are
       * named by their media types (no catch-all or RegExp parser), as `hasContentTypeParser` looks them up.
       */
      const parsable = (req: FastifyRequest) => {
        const type = req.mediaType;
        return type !== undefined && app.hasContentTypeParser(type);
      };
      app.addHook('preParsing', async (req, _reply, payload) => {
        // A body refused 415 is not read: it counts in no budget, as the 413 of a length past the limit below.
        if (!req.tenant || !parsable(req)) return payload;
        const declared = req.headers['content-length'];
        // A chunked body declares no length: counted as it is read, so it weighs on the requests after it.
        if (declared === undefined) {
          if (req.headers['transfer-encoding'] === undefined) return payload; // no body
          const count = (n: number) => void bytes.hit(req.tenant, req.clientToken?.id, n).catch(() => {});
          return countAsRead(payload, count);
        }
        const len = Number(declared);
        // Over the route's body limit the parser answers 413 without reading it: a declared length counts no more.
        if (!Number.isSafeInteger(len) || len <= 0 || len > req.routeOptions.bodyLimit) return payload;
        let refusal: IngestRefusal | null;
        try {
          refusal = await bytes.hit(req.tenant, req.clientToken?.id, len);
        } catch {
          return payload; // as the request limiter: never refused for the counter's own failure
        }
        if (!refusal) return payload;
        const retryAfterS = Math.max(1, Math.ceil(refusal.ttlMs / 1000));
        const limit = refusal.window === 'token' ? bytes.tokenMax : maxBytes;
        throw new HttpRefusal(
          'rate_limited',
          refusal.window === 'token'
            ? `More than ${limit} bytes of request bodies a minute with this client token (a quarter of TENANT_MAX_INGEST_BYTES_PER_MIN).`
            : `More than ${limit} bytes of request bodies a minute (TENANT_MAX_INGEST_BYTES_PER_MIN).`,
          { limit_bytes: limit, retry_after_s: retryAfterS },
          { 'retry-after': String(retryAfterS) },
        );
      });
    }
    const tenantMax = opts.perMinute;
    const tenantRefusal = (max: number, ttlMs: number) =>
      new QuotaExceeded('rate_limited', `More than ${max} mutating requests a minute.`, {
        limit: max,
        retry_after_s: Math.ceil(ttlMs / 1000),
      });
    /** Requests the client token's hook counted in the rate limiter's window too (the limiter skips them). */
    const countedWithToken = new WeakSet<FastifyRequest>();
    if (opts.tokenPerMinute > 0) {
      const windows = new TokenRate(app.redis, opts.tokenPerMinute);
      const max = opts.tokenPerMinute;
      /** The token's hook of one route: `window`, the rate limiter's window of the route (null: none). */
      const tokenHook =
        (window: LimiterWindow | null) =>
        async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
          const token = req.clientToken;
          if (!token || uncounted(req)) return;
          const limit = window && { key: window.key(req), max: window.max };
          let hit: RateHit;
          try {
            hit = await windows.hit(req.tenant, token.id, limit ?? undefined);
          } catch {
            return; // as skipOnError: never refused for the limiter's own failure (the limiter counts it)
          }
          if (limit) countedWithToken.add(req);
          const refused = tokenRateRefusal(hit, max);
          if (refused) {
            reply
              .header('x-ratelimit-limit', max)
              .header('x-ratelimit-remaining', 0)
              .header('x-ratelimit-reset', refused.retryAfterS)
              .header('retry-after', refused.retryAfterS);
            throw refused.error;
          }
          if (!limit) return;
          // The rate limiter's headers and refusal, as it would have answered.
          const resetS = Math.ceil(hit.ttlMs / 1000);
          reply
            .header('x-ratelimit-limit', limit.max)
            .header('x-ratelimit-remaining', Math.max(0, limit.max - hit.count))
            .header('x-ratelimit-reset', resetS);
          if (hit.refusedBy !== 'tenant') return;
          reply.header('retry-after', resetS);
          throw tenantRefusal(limit.max, hit.ttlMs);
        };
      // A route-level preHandler, added to each route before the rate limiter's (whose onRoute hook, registered
      // below, appends its own after it): it runs where the tenant limiter would, after the scope's preHandlers —
      // the idempotency check among them, so a replay or an idempotency refusal is counted in no window, a
      // token's as a tenant key's — and counts the token's request in the limiter's window of that route.
      app.addHook('onRoute', (route) => {
        addPreHandler(route, tokenHook(tenantMax > 0 ? limiterWindow(route, tenantMax) : null));
      });
    }
    if (tenantMax <= 0) return;
    await app.register(rateLimit, {
      global: true,
      hook: 'preHandler',
      max: tenantMax,
      timeWindow: WINDOW_MS,
      // @fastify/rate-limit's Redis store's keys and windows, but a refused request writes nothing (rate-store.ts).
      store: rateStore(app.redis, 'rl:'),
      skipOnError: true,
      keyGenerator: tenantKey,
      allowList: (req) => uncounted(req) || countedWithToken.has(req),
      addHeadersOnExceeding: {
        'x-ratelimit-limit': true,
        'x-ratelimit-remaining': true,
        'x-ratelimit-reset': true,
      },
      addHeaders: {
        'x-ratelimit-limit': true,
        'x-ratelimit-remaining': true,
        'x-ratelimit-reset': true,
        'retry-after': true,
      },
      errorResponseBuilder: (_req, ctx) => tenantRefusal(ctx.max, ctx.ttl),
    });
  },
  { name: 'ratelimit', dependencies: ['redis', 'auth'] },
);
