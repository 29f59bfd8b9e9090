import fp from 'fastify-plugin';
import { timingSafeEqual, createHash } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { AppError } from '../errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    tenant: string;
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

/**
 * Requires a key on every route of the scope it is registered in (the `/v1` scope of app.ts): an `onRequest` hook
 * of that encapsulated context, so it runs for whatever spelling of a path the router matched to one of its routes
 * (`/%761/…`, `//v1/…`, absolute-form targets…), and never depends on the raw URL. Sets `req.tenant`.
 */
export default fp<AuthOptions>(
  async (app, opts) => {
    app.decorateRequest('tenant', '');
    app.addHook('onRequest', async (req) => {
      if (!opts.keys) {
        req.tenant = 'default';
        return;
      }
      const token = bearerOf(req);
      const tenant = token ? tenantOf(opts.keys, token) : undefined;
      if (!tenant)
        throw new AppError(401, 'unauthorized', 'A valid bearer API key is required.', undefined, {
          'www-authenticate': 'Bearer',
        });
      req.tenant = tenant;
    });
  },
  { name: 'auth' },
);
