import { QuotaExceeded } from '../errors.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import './lua/commands.js';

/** One request offered to a client token's window (and the rate limiter's: its tenant's, or its route's own). */
export interface RateHit {
  /** Null when counted; else the window that refused it (counted in neither): `tenant`, the rate limiter's. */
  refusedBy: 'token' | 'tenant' | null;
  /**
   * Counted: the requests of the rate limiter's window so far, this one included (the token's without one).
   * Refused: the count the request would have made in the window that refused it.
   */
  count: number;
  /** ms left in that window. */
  ttlMs: number;
}

/**
 * Fixed windows of a client token's mutating requests (CLIENT_TOKEN_RATE_LIMIT_PER_MIN, src/plugins/ratelimit.ts),
 * across replicas: one counter per token in Redis, counted by one script (lua/rate-hit-2.lua) together with the
 * rate limiter's window of the request when there is one (its tenant's, or its route's own), so a request is
 * counted in both or, refused by either, in neither and nothing is written. The key carries the tenant's hash tag (a Redis Cluster keeps it beside the
 * tenant's other counts); the token id names its session, so tokens never share a window.
 */
export class TokenRate {
  constructor(
    private readonly redis: RedisClient,
    readonly max: number,
    private readonly windowMs = 60_000,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'quota');
  }

  /**
   * `window`: the rate limiter's window that counts the request too (the tenant's `rl:{tenant}`, or the route's own:
   * src/plugins/ratelimit.ts), its key and max; none: the token's alone.
   */
  async hit(tenant: string, tokenId: string, window?: { key: string; max: number }): Promise<RateHit> {
    const key = `rl:{${tenant}}:ct:${tokenId}`;
    const [, by, count, ttlMs] = await this.redis.quotaRateHit(
      key,
      window ? window.key : key,
      this.windowMs,
      this.max,
      window ? window.max : 0,
    );
    return { refusedBy: by === 1 ? 'token' : by === 2 ? 'tenant' : null, count, ttlMs };
  }
}

/**
 * The refusal of a client token's request or frame past its window (429 `rate_limited`, `details: {limit,
 * retry_after_s}`), or null unless `hit` was refused by the token's window.
 */
export function tokenRateRefusal(
  hit: RateHit,
  max: number,
): { error: QuotaExceeded; retryAfterS: number } | null {
  if (hit.refusedBy !== 'token') return null;
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
