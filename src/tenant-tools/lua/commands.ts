/**
 * The types of the tool-task scripts (the `.lua` files beside this one), defined by
 * `defineLuaCommands(redis, …, 'tt')` as `tt<Name>` (src/store/lua-commands.ts); declared once by augmenting
 * ioredis's `RedisCommander`, as the session store's scripts are (src/store/lua/commands.ts). Keys first, in the
 * order of each script's header, then its arguments.
 */
import type { Result } from 'ioredis';

type Keys<N extends number, A extends string[] = []> = A['length'] extends N ? A : Keys<N, [...A, string]>;

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /**
     * tool-put-1.lua: `[outcome, revision, created_at, made]`: outcome 1 created, 0 replaced, -1 at the limit, -2
     * If-Match; made 1 when the given sealed secret was stored.
     */
    ttToolPut(
      tools: string,
      name: string,
      definition: string,
      max: number,
      ifMatch: string,
      now: number,
      sealed: string,
      applied: string,
    ): Result<[outcome: number, revision: number, createdAt: number, made: number], Context>;
    /** tool-remove-1.lua: `[1, rev]` removed, `[0, 0]` none, `[-2, current]` If-Match. */
    ttToolRemove(
      tools: string,
      name: string,
      ifMatch: string,
    ): Result<[outcome: number, revision: number], Context>;
    /**
     * enqueue-7.lua: calls as (call, record, input, queue) quadruples; per call, 1 queued, 0 known already (counted in
     * its `wanted`), 2 settled, -1 the tenant's queue is full.
     */
    ttEnqueue(
      ...args: [...keys: Keys<7>, max: number, channel: string, ...calls: string[]]
    ): Result<number[], Context>;
    /**
     * claim-6.lua: `more` (1: the byte bound left a due call behind, else 0), then record, input, owed (a JSON array
     * of records) triples.
     */
    ttClaim(
      ...args: [
        ...keys: Keys<6>,
        leaseMs: number,
        max: number,
        worker: string,
        prefix: string,
        maxBytes: number,
        ...tools: string[],
      ]
    ): Result<[more: number, ...rows: string[]], Context>;
    /** heartbeat-3.lua: `['ok', record]` (renewed) or `[refusal]` (`['completed', record]`). */
    ttHeartbeat(...args: [...keys: Keys<3>, offer: string, leaseMs: number]): Result<string[], Context>;
    /** complete-7.lua: `['ok', record]` or `[refusal]` (`['completed', record]`). */
    ttComplete(...args: [...keys: Keys<7>, offer: string, result: string]): Result<string[], Context>;
    /** release-9.lua: `['retried', owed record]`, `['failed', record]` or `[refusal]`. */
    ttRelease(
      ...args: [...keys: Keys<9>, offer: string, delayMs: number, error: string, failure: string]
    ): Result<string[], Context>;
    /** settle-9.lua: 1 when the call was known, 2 a cancel refused (queued again since `wanted`), 0 unknown. */
    ttSettle(
      ...args: [
        ...keys: Keys<9>,
        call: string,
        state: string,
        gcAfterMs: number,
        stopChannel: string,
        wanted: string,
      ]
    ): Result<number, Context>;
    /** sweep-11.lua: Redis's now, next due, live then gc (ms, -1: none), then kind, record pairs. */
    ttSweep(
      ...args: [...keys: Keys<11>, limit: number, channel: string]
    ): Result<Array<number | string>, Context>;
    /** pending-5.lua: `[live, gc, now]`, when the queue next needs a sweep (ms, -1: none), and Redis's now. */
    ttPending(...keys: Keys<5>): Result<[live: number, gc: number, now: number], Context>;
    /** due-claim-1.lua: the due tenants taken, each held `holdMs` from now (Redis's clock). */
    ttDueClaim(due: string, limit: number, holdMs: number): Result<string[], Context>;
    /** due-set-1.lua: the tenant's due time set (Redis's clock), -1 when taken off (`inMs` ''). */
    ttDueSet(due: string, tenant: string, inMs: number | '', mode: 'LT' | ''): Result<number, Context>;
    /** workers-1.lua: `[now, member, ms, …]`, the pairs seen and Redis's now. */
    ttWorkers(workers: string): Result<Array<string | number>, Context>;
    /** http-left-1.lua: 1 when the tenant has calls of http tools queued. */
    ttHttpLeft(ready: string): Result<number, Context>;
    /** seen-2.lua: the number of tools recorded. */
    ttSeen(
      ...args: [
        ...keys: Keys<2>,
        worker: string,
        agoMs: number,
        keepMs: number,
        cap: number,
        ...tools: string[],
      ]
    ): Result<number, Context>;
  }
}
