/**
 * The types of the quotas' scripts (acquire-slot-1.lua and rate-hit-1.lua beside this file), defined by
 * `defineLuaCommands(redis, …, 'quota')` as `quotaAcquireSlot` and `quotaRateHit` (src/store/lua-commands.ts);
 * declared once by augmenting ioredis's `RedisCommander`, as the stores' scripts are (src/store/lua/commands.ts).
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** acquire-slot-1.lua: 1 when the slot was taken, 0 when `max` live slots are held. */
    quotaAcquireSlot(
      key: string,
      now: number,
      expiry: number,
      max: number,
      member: string,
    ): Result<number, Context>;
    /** rate-hit-1.lua: `[count, ms left in the window]`, this request counted. */
    quotaRateHit(key: string, windowMs: number): Result<[number, number], Context>;
  }
}
