/**
 * The types of the sub-agents' scripts (the `.lua` files beside this one), defined by
 * `defineLuaCommands(redis, …, 'agents')` as `agents<Name>` (src/store/lua-commands.ts), keys first, then arguments.
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** children-waiting-2.lua: 1 when the event was written, 0 when the list is unchanged. */
    agentsChildrenWaiting(
      meta: string,
      events: string,
      ...args: Array<string | number>
    ): Result<number, Context>;
    /** children-mark-1.lua: the child's mark in the set (ms; kept when it had one above 0). */
    agentsChildrenMark(children: string, child: string): Result<string, Context>;
    /** children-page-1.lua: member, score, member, score, … of the children after a cursor, in the set's order. */
    agentsChildrenPage(
      children: string,
      score: string,
      member: string,
      count: number,
    ): Result<string[], Context>;
  }
}
