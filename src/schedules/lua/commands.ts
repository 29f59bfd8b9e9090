/**
 * The types of the schedules' scripts (the `.lua` files beside this one), defined by
 * `defineLuaCommands(redis, …, 'sched')` as `sched<Name>` (src/store/lua-commands.ts), keys first, then arguments.
 */
import type { Result } from 'ioredis';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** claim-2.lua. */
    schedClaim(meta: string, events: string, ...args: Array<string | number>): Result<string, Context>;
    /** create-2.lua: 1, or 0 when the schedule exists. */
    schedCreate(meta: string, events: string, ...args: Array<string | number>): Result<number, Context>;
    /** delete-4.lua. */
    schedDelete(
      meta: string,
      events: string,
      runs: string,
      fanout: string,
      ...args: Array<string | number>
    ): Result<[code: number, revision: number], Context>;
    /** alive-1.lua: since when replicas have run without a gap (ms, Redis's clock). */
    schedAlive(alive: string, gapMs: number): Result<number, Context>;
    /** due-1.lua: Redis's now (ms), then the ids due by it. */
    schedDue(due: string, limit: number): Result<[number, ...string[]], Context>;
    /** due-set-1.lua: 1 when written, 0 when the entry is no longer as read (`score`: '' none; `next`: '' drops it). */
    schedDueSet(due: string, id: string, score: string, next: string): Result<number, Context>;
    /** charge-3.lua: 1 when charged (and listed), 0 at the tenant's most schedules, -1 past its most bytes. */
    schedCharge(
      count: string,
      ledger: string,
      index: string,
      ...args: [id: string, bytes: string, ceiling: string, legacy: string, member: string, max: number]
    ): Result<number, Context>;
    /** settle-2.lua: 1 when settled, 0 when the ledger changed since its `seq` was read. */
    schedSettle(
      count: string,
      ledger: string,
      ...args: [id: string, seq: string, keeps: string, legacy: string]
    ): Result<number, Context>;
    /** retake-1.lua: 1 when the caller now holds the pending fire's lease (`leaseMs` from Redis's now). */
    schedRetake(meta: string, fireAt: number, leaseMs: number): Result<number, Context>;
    /** finish-3.lua: 1, or 0 when the fire is not pending. */
    schedFinish(
      meta: string,
      events: string,
      runs: string,
      ...args: Array<string | number>
    ): Result<number, Context>;
    /** update-2.lua. */
    schedUpdate(
      meta: string,
      events: string,
      tenant: string,
      revision: string,
      set: string,
      del: string,
      now: number,
      data: string,
      ...logAndNext: [channel: string, max: number, notice: number, bytes: number, expectedNext: string]
    ): Result<[code: number, revision: number], Context>;
  }
}
