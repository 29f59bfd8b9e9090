import { QuotaExceeded } from '../errors.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import './lua/commands.js';

/** One request offered to a client token's window (and its tenant's). */
export interface RateHit {
  /** Null when counted; else the window that refused it (counted in neither). */
  refusedBy: 'token' | 'tenant' | null;
  /**
   * Counted: the requests of the tenant's window so far, this one included (the token's without a tenant window).
   * Refused: the count the request would have made in the window that refused it.
   */
  count: number;
  /** ms left in that window. */
  ttlMs: number;
}

/**
 * Fixed windows of a client token's mutating requests (CLIENT_TOKEN_RATE_LIMIT_PER_MIN, src/plugins/ratelimit.ts),
 * across replicas: one counter per token in Redis, counted by one script (lua/rate-hit-2.lua) together with the
 * tenant's own window when there is one (`tenantMax`), so a request is counted in both or, refused by either, in
 * neither and nothing is written. The key carries the tenant's hash tag (a Redis Cluster keeps it beside the
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

  /** `tenantMax`: the tenant's window (`rl:{tenant}`, the rate limiter's) counts the request too; 0: none. */
  async hit(tenant: string, tokenId: string, tenantMax = 0): Promise<RateHit> {
    const key = `rl:{${tenant}}:ct:${tokenId}`;
    const [, by, count, ttlMs] = await this.redis.quotaRateHit(
      key,
      tenantMax > 0 ? tenantWindowKey(tenant) : key,
      this.windowMs,
      this.max,
      tenantMax,
    );
    return { refusedBy: by === 1 ? 'token' : by === 2 ? 'tenant' : null, count, ttlMs };
  }
}

/** The tenant's window of RATE_LIMIT_PER_MIN: the rate limiter's key for it (its `rl:` namespace and key). */
const tenantWindowKey = (tenant: string) => `rl:{${tenant}}`;

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
