/**
 * The type of the spend's script (record-1.lua beside this file), defined by `defineLuaCommands(redis, …, 'cost')`
 * as `costRecord` (src/store/lua-commands.ts); declared once by augmenting ioredis's `RedisCommander`, as the
 * stores' scripts are (src/store/lua/commands.ts).
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** record-1.lua: HINCRBY of each field by its increment, then EXPIRE; answers 1. */
    costRecord(key: string, ttlS: number, ...fieldIncrs: Array<string | number>): Result<number, Context>;
  }
}
