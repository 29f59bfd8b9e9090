import type { FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import './lua/commands.js';

type Done = (error: Error | null, result?: { current: number; ttl: number }) => void;

/**
 * The rate limiter's store (@fastify/rate-limit's `store`, src/plugins/ratelimit.ts): the keys and fixed windows of
 * its Redis store (`<nameSpace><key>`; a route with a limit of its own, `<nameSpace><METHOD><url>-<key>`), counted
 * by lua/rate-hit-2.lua instead of its script, which counts every request, the refused ones too: past the limit,
 * each refused request went on increasing the counter. Here a request over the limit is answered from a read and
 * writes nothing; one round trip either way.
 */
type RouteInfo = { method: string | string[]; url: string };

/**
 * The prefix of the keys of a route's own windows (a route whose `config.rateLimit` sets its own limit), as
 * @fastify/rate-limit's Redis store makes them: `<nameSpace><METHOD><url>-`, then the route's key.
 */
export const routeWindowPrefix = (nameSpace: string, route: RouteInfo) =>
  `${nameSpace}${String(route.method)}${route.url}-`;

export function rateStore(redis: RedisClient, nameSpace: string): FastifyRateLimitStoreCtor {
  defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'quota');
  class RateStore implements FastifyRateLimitStore {
    private readonly prefix: string;
    /** @fastify/rate-limit constructs it with its options; `child` with the prefix of a route's own windows. */
    constructor(_options: unknown, prefix = nameSpace) {
      this.prefix = prefix;
    }

    incr(key: string, done: Done, timeWindow: number, max: number): void {
      const k = this.prefix + key;
      redis.quotaRateHit(k, k, timeWindow, max, max).then(
        ([, , current, ttl]) => done(null, { current, ttl }),
        (err: Error) => done(err),
      );
    }

    child(routeOptions: unknown): FastifyRateLimitStore {
      const { routeInfo } = routeOptions as { routeInfo: RouteInfo };
      return new RateStore(null, routeWindowPrefix(this.prefix, routeInfo));
    }
  }
  return RateStore;
}
