import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import './lua/commands.js';

/** What a body was refused for: the tenant's window, or its client token's. */
export type IngestRefusal = { window: 'tenant' | 'token'; ttlMs: number };

/**
 * Fixed windows of request body bytes (TENANT_MAX_INGEST_BYTES_PER_MIN, src/plugins/ratelimit.ts), across replicas:
 * one counter per tenant in Redis and, for a client token (a browser's: untrusted), one of its own holding a quarter
 * of the tenant's budget, so that one page cannot use up its tenant's bytes; both counted by one script
 * (lua/ingest-hit-2.lua). The request count (RATE_LIMIT_PER_MIN) alone lets a tenant send its allowance as bodies of
 * BODY_LIMIT bytes each, whose parsing and storing take a process's CPU from every other tenant; this bounds the
 * bytes. A body that would pass a budget is counted in neither; the first body of a window is always let through
 * (BODY_LIMIT bounds it).
 */
export class IngestBytes {
  readonly tokenMax: number;

  constructor(
    private readonly redis: RedisClient,
    readonly maxPerWindow: number,
    private readonly windowMs = 60_000,
  ) {
    this.tokenMax = Math.ceil(maxPerWindow / 4);
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'quota');
  }

  /** Counts `bytes` of the tenant's (and of its client token's, `tokenId`); the refusal when they do not fit. */
  async hit(tenant: string, tokenId: string | undefined, bytes: number): Promise<IngestRefusal | null> {
    const tenantKey = `rl:{${tenant}}:bytes`;
    const [counted, ttlMs, byToken] = await this.redis.quotaIngestHit(
      tenantKey,
      tokenId === undefined ? tenantKey : `rl:{${tenant}}:ct:${tokenId}:bytes`,
      this.windowMs,
      bytes,
      this.maxPerWindow,
      this.tokenMax,
    );
    return counted === 1 ? null : { window: byToken === 1 ? 'token' : 'tenant', ttlMs };
  }
}
