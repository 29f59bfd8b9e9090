/**
 * The type of the spend's script (record-2.lua beside this file), defined by `defineLuaCommands(redis, …, 'cost')`
 * as `costRecord` (src/store/lua-commands.ts); declared once by augmenting ioredis's `RedisCommander`, as the
 * stores' scripts are (src/store/lua/commands.ts).
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /**
     * record-2.lua: per turn (session, seq, in, out, cw, cr, cost, nc), HINCRBY of the day's counters unless the
     * session's seq was recorded already, then EXPIRE; answers the number of turns added.
     */
    costRecord(
      day: string,
      spent: string,
      ttlS: number,
      ...turns: Array<string | number>
    ): Result<number, Context>;
  }
}
