/**
 * The types of the tenant MCP servers' scripts (the `.lua` files beside this one), defined by
 * `defineLuaCommands(redis, …, 'mcp')` as `mcp<Name>` (src/store/lua-commands.ts), by augmenting ioredis's
 * `RedisCommander` as src/webhooks/lua/commands.ts does.
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** put-1.lua: `[1, revision]` created, `[0, revision]` replaced, `[-1, 0]` at the limit, `[-2, current]` If-Match. */
    mcpPut(
      servers: string,
      name: string,
      url: string,
      headers: string,
      headerNames: string,
      now: number,
      max: number,
      ifMatch: string,
    ): Result<[outcome: number, revision: number], Context>;
    /** remove-1.lua: `[1, revision]` removed, `[0, 0]` none, `[-2, current]` If-Match does not match. */
    mcpRemove(
      servers: string,
      name: string,
      ifMatch: string,
    ): Result<[outcome: number, revision: number], Context>;
  }
}
