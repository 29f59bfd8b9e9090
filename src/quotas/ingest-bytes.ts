import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import './lua/commands.js';

/**
 * Fixed windows of a tenant's request body bytes (TENANT_MAX_INGEST_BYTES_PER_MIN, src/plugins/ratelimit.ts),
 * across replicas: one counter per tenant in Redis, counted by one script (lua/ingest-hit-1.lua). The request
 * count (RATE_LIMIT_PER_MIN) alone lets a tenant send its allowance as bodies of BODY_LIMIT bytes each, whose
 * parsing and storing take a process's CPU from every other tenant; this bounds the bytes. A body that would pass the
 * budget is not counted; the first body of a window is always let through (whatever its size: BODY_LIMIT bounds it).
 */
export class IngestBytes {
  constructor(
    private readonly redis: RedisClient,
    readonly maxPerWindow: number,
    private readonly windowMs = 60_000,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'quota');
  }

  /** Counts `bytes` of the tenant's; `ok` false when they would take the window past its budget. */
  async hit(tenant: string, bytes: number): Promise<{ ok: boolean; ttlMs: number }> {
    const [counted, , ttlMs] = await this.redis.quotaIngestHit(
      `rl:{${tenant}}:bytes`,
      this.windowMs,
      bytes,
      this.maxPerWindow,
    );
    return { ok: counted === 1, ttlMs };
  }
}
