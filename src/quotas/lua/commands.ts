/**
 * The types of the quotas' scripts (the .lua files beside this one), defined by
 * `defineLuaCommands(redis, …, 'quota')` as `quotaAcquireSlot`, `quotaRenewSlots`, `quotaRateHit`, `quotaIngestHit`, `quotaReplicaAlive` and `quotaLapsedReplicas`
 * (src/store/lua-commands.ts); declared once by augmenting ioredis's `RedisCommander`, as the stores' scripts are
 * (src/store/lua/commands.ts).
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** acquire-slot-1.lua: 1 when the slot was taken (to live `ttlMs` from Redis's now), 0 when `max` live slots are held. */
    quotaAcquireSlot(
      key: string,
      ttlMs: number,
      max: number,
      member: string,
      ...lapsedReplicas: string[]
    ): Result<number, Context>;
    /** renew-slots-1.lua: the members still held live `ttlMs` from Redis's now; how many were. */
    quotaRenewSlots(key: string, ttlMs: number, ...members: string[]): Result<number, Context>;
    /**
     * rate-hit-2.lua: `[1 counted | 0 refused, the refusing window (1, 2; 0), count, ms left]`; a refused request is
     * counted in neither window.
     */
    quotaRateHit(
      key: string,
      secondKey: string,
      windowMs: number,
      max: number,
      secondMax: number,
    ): Result<[counted: number, refusedBy: number, count: number, ttlMs: number], Context>;
    /** replica-alive-1.lua: the replica counts as alive for `aliveMs` more (Redis's clock). */
    quotaReplicaAlive(key: string, replica: string, aliveMs: number, keepMs: number): Result<number, Context>;
    /** lapsed-replicas-1.lua: ids of replicas whose liveness lapsed (at most `limit`). */
    quotaLapsedReplicas(key: string, limit: number): Result<string[], Context>;
    /** ingest-hit-2.lua: `[1 counted | 0 refused, ms left in the refusing window, 1 when the token's refused]`. */
    quotaIngestHit(
      tenantKey: string,
      tokenKey: string,
      windowMs: number,
      bytes: number,
      tenantMax: number,
      tokenMax: number,
    ): Result<[counted: number, ttlMs: number, byToken: number], Context>;
  }
}
