/**
 * The types of the tenant MCP servers' scripts (the `.lua` files beside this one), defined by
 * `defineLuaCommands(redis, …, 'mcp')` as `mcp<Name>` (src/store/lua-commands.ts), by augmenting ioredis's
 * `RedisCommander` as src/webhooks/lua/commands.ts does.
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** put-1.lua: `[1, revision]` created, `[0, revision]` replaced, `[-1, 0]` at the tenant's limit. */
    mcpPut(
      servers: string,
      name: string,
      url: string,
      headers: string,
      headerNames: string,
      now: number,
      max: number,
    ): Result<[outcome: number, revision: number], Context>;
  }
}
