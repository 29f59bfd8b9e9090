import fp from 'fastify-plugin';
import { timingSafeEqual, createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { DomainError, NotFound } from '../errors.js';
import { HttpRefusal, TokenExpired } from './error-status.js';
import {
  ClientTokens,
  isClientToken,
  type ClientScope,
  type ClientTokenRecord,
} from '../store/client-tokens.js';

declare module 'fastify' {
  interface FastifyRequest {
    tenant: string;
    /** The client token the request authenticated with (spec §7.2), or null for a tenant key (or open mode). */
    clientToken: ClientTokenRecord | null;
  }
  interface FastifyInstance {
    /** Client tokens (spec §7.2): minted by routes/client-tokens.ts, checked here. */
    clientTokens: ClientTokens;
  }
  interface FastifyContextConfig {
    /**
     * The client-token scope a route of one session (`/v1/sessions/:id/…`, `/v1/chat…`) needs (a list: any of them,
     * the handler checking the one each part of the request needs with `requireScope`); a client token is refused
     * on a route without one (403 `scope_denied`). Tenant keys pass whatever the route declares.
     */
    scope?: ClientScope | readonly ClientScope[];
    /** Where the route's session id is: the `:id` param (default), or the body's `id` (checked before the handler). */
    sessionIn?: 'params' | 'body';
  }
}

export interface AuthOptions {
  /** key → tenant; undefined runs open (only allowed on loopback, checked at boot) as tenant `default`. */
  keys: Map<string, string> | undefined;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Finds the tenant of a bearer key, comparing digests in constant time. */
export function tenantOf(keys: Map<string, string>, token: string): string | undefined {
  const d = digest(token);
  let found: string | undefined;
  for (const [key, tenant] of keys) if (timingSafeEqual(digest(key), d)) found = tenant;
  return found;
}

/**
 * The bearer token of a request: `Authorization: Bearer <key>`, or for browsers (which cannot set headers on a
 * WebSocket) the subprotocol pair `Sec-WebSocket-Protocol: bearer, <key>`.
 */
export function bearerOf(req: FastifyRequest): string | undefined {
  const auth = req.headers.authorization;
  if (auth) return /^Bearer\s+(.+)$/i.exec(auth)?.[1]?.trim();
  const proto = req.headers['sec-websocket-protocol'];
  if (typeof proto === 'string') {
    const parts = proto.split(',').map((p) => p.trim());
    const i = parts.indexOf('bearer');
    if (i >= 0) return parts[i + 1];
  }
  return undefined;
}

const unauthorized = (message = 'A valid bearer API key is required.') =>
  new HttpRefusal('unauthorized', message, undefined, { 'www-authenticate': 'Bearer' });

const tokenRevoked = () => unauthorized('The client token is unknown or revoked.');

/**
 * Why a client token's record does not authenticate at `now`: revoked or unknown (null), or expired. Also asked
 * again by open streams (routes/stream.ts, routes/events.ts) so a revocation ends them. `now` is Redis's clock (the
 * tokens' `clock.now()`), the one `expires_at` was minted in: with the answering replica's own, one ahead refused a
 * live token (401 `token_expired`), one behind accepted an expired one.
 */
export function tokenRefusal(rec: ClientTokenRecord | null, now: number): DomainError | null {
  if (!rec) return tokenRevoked();
  if (rec.expires_at <= now) return tokenExpired();
  return null;
}

const tokenExpired = () =>
  new TokenExpired('The client token has expired.', undefined, {
    'www-authenticate': 'Bearer error="invalid_token"',
  });

/** What watchToken returns: `check()` before acting for the token, `stop()` when the stream ends. */
export interface TokenWatch {
  check(): Promise<DomainError | null>;
  /**
   * The stream is about to send the `client_token.revoked` event of token `id` (src/events/sink.ts): when it is the
   * watched token, the stream ends now (`end`, synchronously, so nothing after that event is sent) and this is true.
   */
  revokedBy(id: string): boolean;
  stop(): void;
}

/** A stream opened with a tenant key watches nothing: one watcher for all of them (none per connection). */
const NO_WATCH: TokenWatch = { check: async () => null, revokedBy: () => false, stop() {} };

/**
 * Watches the client token an open stream was authenticated with: `end` is called once, at its expiry, when the
 * stream reaches the `client_token.revoked` event of the token in the session's log (`revokedBy`: the revocation
 * ends the stream on every replica at that event, before anything newer is sent), or at the first check (every
 * `everyMs`, and when `check()` is called, e.g. before a client frame) that finds it revoked or its session deleted
 * — the fallback for a revocation whose event was not logged (a store outage after the token was removed). A
 * deleted session's streams end at its `session.deleted` event by themselves. A failed read (Redis down) keeps the
 * stream. Returns the watcher; `stop()` when the stream ends. Without a token it does nothing.
 */
export function watchToken(
  tokens: ClientTokens,
  rec: ClientTokenRecord | null,
  everyMs: number,
  end: (err: DomainError) => void,
): TokenWatch {
  if (!rec) return NO_WATCH;
  let done = false;
  const finish = (err: DomainError) => {
    if (done) return;
    stop();
    end(err);
  };
  const check = async (): Promise<DomainError | null> => {
    if (done) return tokenRevoked();
    const refused =
      tokenRefusal(rec, tokens.clock.now()) ??
      ((await tokens.isLive(rec).catch(() => true)) ? null : tokenRevoked());
    if (refused) finish(refused);
    return refused;
  };
  const expiry = setTimeout(
    () => finish(tokenExpired()),
    Math.min(Math.max(rec.expires_at - tokens.clock.now(), 0), 2_147_483_647),
  );
  const timer = setInterval(() => void check(), everyMs);
  expiry.unref();
  timer.unref();
  function stop() {
    done = true;
    clearTimeout(expiry);
    clearInterval(timer);
  }
  const revokedBy = (id: string): boolean => {
    if (id !== rec.id) return false;
    finish(tokenRevoked());
    return true;
  };
  return { check, revokedBy, stop };
}

/**
 * Who a request acts as, recorded as `by` on what it does (`message.queued`, `tool_call.decided`): a client token's
 * subject, or its id when it was minted without one; undefined for a tenant key.
 */
export const actorOf = (token: ClientTokenRecord | null): string | undefined =>
  token ? (token.subject ?? token.id) : undefined;

/**
 * Whether the caller may see the session it acts on (spec §7.2 `read`): a tenant key, or a client token holding
 * `read`. A change made without it answers only the session's receipt (`receiptOf`), and a chat answer no run.
 */
export const readsSession = (token: ClientTokenRecord | null): boolean =>
  !token || token.scopes.includes('read');

/** 403 `scope_denied` unless the client token (if any) holds `scope`. For WebSocket frames, which share a route. */
export function requireScope(token: ClientTokenRecord | null, scope: ClientScope): void {
  if (token && !token.scopes.includes(scope)) throw scopeDenied(scope);
}

const scopeDenied = (scope: ClientScope | undefined) =>
  new DomainError(
    'scope_denied',
    scope
      ? `This client token does not hold the scope "${scope}".`
      : 'A client token cannot be used on this route.',
    scope ? { scope } : undefined,
  );

const sessionNotFound = () => new NotFound('session');

/** The `:id` of a session route, as the router matched it (or the body's `id`: `sessionIn: 'body'`). */
const sessionParam = (params: unknown): string | undefined => {
  if (typeof params !== 'object' || params === null || !('id' in params)) return undefined;
  return typeof params.id === 'string' ? params.id : undefined;
};

/**
 * A request with a client token: the token's record must exist and be current, the route must declare a scope the
 * token holds, and the route's session must be the token's (another session: 404, as for another tenant's).
 */
async function authenticateToken(req: FastifyRequest, tokens: ClientTokens, bearer: string): Promise<void> {
  const rec = await tokens.lookup(bearer);
  const refused = tokenRefusal(rec, tokens.clock.now());
  if (refused || !rec) throw refused ?? unauthorized();
  const { scope, sessionIn } = req.routeOptions.config;
  // No route: 404 `route_not_found`, as for a key (the /v1 catch-all answers it).
  if (req.routeOptions.url !== UNROUTED) {
    // A route of a session (`/v1/sessions/:id/…`, `/v1/chat/:id/…`) that is not the token's: 404, as another
    // tenant's, whatever the route's scope (fork, a tenant key's, too). Another route without a scope: 403.
    if (sessionIn !== 'body' && isSessionRoute(req) && sessionParam(req.params) !== rec.session_id)
      throw sessionNotFound();
    if (!scope) throw scopeDenied(undefined);
    // A session named in the body is known only once the body is parsed: the route's scope is checked after it
    // (the preHandler below), so that a token of another session is 404 whatever its scopes, never 403.
    if (sessionIn !== 'body') {
      if (sessionParam(req.params) !== rec.session_id) throw sessionNotFound();
      requireRouteScope(rec, scope);
    }
  }
  req.tenant = rec.tenant;
  req.clientToken = rec;
}

/** The `/v1` scope's catch-all route (src/app.ts): its unknown paths. */
export const UNROUTED = '/v1/*';

/** Whether the route's `:id` is a session's. */
const isSessionRoute = (req: FastifyRequest): boolean => {
  const url = req.routeOptions.url ?? '';
  return url.startsWith('/v1/sessions/:id') || url.startsWith('/v1/chat/:id');
};

/** 403 `scope_denied` unless the token holds one of the scopes the route declares. */
function requireRouteScope(rec: ClientTokenRecord, scope: ClientScope | readonly ClientScope[]): void {
  const any = typeof scope === 'string' ? [scope] : scope;
  if (!any.some((s) => rec.scopes.includes(s))) throw scopeDenied(any[0]);
}

/**
 * Requires a key on every route of the scope it is registered in (the `/v1` scope of app.ts): an `onRequest` hook
 * of that encapsulated context, so it runs for whatever spelling of a path the router matched to one of its routes
 * (`/%761/…`, `//v1/…`, absolute-form targets…), and never depends on the raw URL. Sets `req.tenant`
 * (and `req.clientToken` for a client token, which it holds to its session and to the scope the route declares).
 */
export default fp<AuthOptions>(
  async (app, opts) => {
    // Minted and checked in Redis's clock as the store reckons it (the engine plugin's store, registered before).
    const tokens = new ClientTokens(app.redis, app.store.clock, app.store.storage);
    app.decorate('clientTokens', tokens);
    app.decorateRequest('tenant', '');
    app.decorateRequest('clientToken', null);
    app.addHook('onRequest', async (req) => {
      const bearer = bearerOf(req);
      const tenant = opts.keys && bearer ? tenantOf(opts.keys, bearer) : undefined;
      if (tenant) {
        req.tenant = tenant;
        return;
      }
      // A client token is one in open mode too: it restricts the request to its session and scopes.
      if (bearer && isClientToken(bearer)) return authenticateToken(req, tokens, bearer);
      if (!opts.keys) {
        req.tenant = 'default';
        return;
      }
      throw unauthorized();
    });
    // A route whose session is named in its body: the token's session, checked once the body is parsed, then the
    // route's scope (authenticateToken left it for here). Before the Idempotency-Key's replay (registered after).
    app.addHook('preHandler', async (req) => {
      const { scope, sessionIn } = req.routeOptions.config;
      if (!req.clientToken || sessionIn !== 'body' || !scope) return;
      if (sessionParam(req.body) !== req.clientToken.session_id) throw sessionNotFound();
      requireRouteScope(req.clientToken, scope);
    });
  },
  { name: 'auth' },
);
