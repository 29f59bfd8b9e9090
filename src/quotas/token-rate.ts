import { QuotaExceeded } from '../errors.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import './lua/commands.js';

/** One request counted in a client token's window. */
export interface RateHit {
  /** Requests of the window so far, this one included. */
  count: number;
  /** ms left in the window. */
  ttlMs: number;
}

/**
 * Fixed windows of a client token's mutating requests (CLIENT_TOKEN_RATE_LIMIT_PER_MIN, src/plugins/ratelimit.ts),
 * across replicas: one counter per token in Redis, counted by one script (lua/rate-hit-1.lua: INCR, and the
 * window's expiry set by its first request), as @fastify/rate-limit's Redis store counts a tenant's. The key
 * carries the tenant's hash tag (a Redis Cluster keeps it beside the tenant's other counts); the token id names
 * its session, so tokens never share a window.
 */
export class TokenRate {
  constructor(
    private readonly redis: RedisClient,
    private readonly windowMs = 60_000,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'quota');
  }

  async hit(tenant: string, tokenId: string): Promise<RateHit> {
    const [count, ttlMs] = await this.redis.quotaRateHit(`rl:{${tenant}}:ct:${tokenId}`, this.windowMs);
    return { count, ttlMs };
  }
}

/**
 * The refusal of a client token's request or frame past `max` in its window (429 `rate_limited`, `details: {limit,
 * retry_after_s}`), or null while `hit` is within it.
 */
export function tokenRateRefusal(
  hit: RateHit,
  max: number,
): { error: QuotaExceeded; retryAfterS: number } | null {
  if (hit.count <= max) return null;
  const retryAfterS = Math.max(1, Math.ceil(hit.ttlMs / 1000));
  const error = new QuotaExceeded(
    'rate_limited',
    `More than ${max} mutating requests a minute with this client token.`,
    {
      limit: max,
      retry_after_s: retryAfterS,
    },
  );
  return { error, retryAfterS };
}
