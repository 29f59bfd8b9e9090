/**
 * The types of the webhooks' scripts (the `.lua` files beside this one), as ioredis commands: each file
 * `<name>-<n>.lua` is defined by `defineLuaCommands(redis, …, 'wh')` as `wh<Name>` (src/store/lua-commands.ts).
 * Declared here, once, by augmenting ioredis's `RedisCommander` (as bullmq does), so `Redis` and `Cluster` both have
 * them typed: keys first, then arguments, and the reply as the script's header states it.
 */
import type { Result } from 'ioredis';
import type { StreamEntry } from '../../store/lua/commands.js';
import type { Outcome } from '../outbox.js';

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** fanout-begin-3.lua: `['busy']`, or the cursor, the tenant ('' unknown) and the entries after the cursor. */
    whFanoutBegin(
      events: string,
      state: string,
      lease: string,
      owner: string,
      leaseMs: number,
      count: number,
    ): Result<
      [status: 'busy'] | [status: 'ok', cursor: string, tenant: string, entries: StreamEntry[]],
      Context
    >;
    /** fanout-end-3.lua: 1, or 0 when the lease is no longer ours. */
    whFanoutEnd(
      state: string,
      lease: string,
      events: string,
      owner: string,
      cursor: string,
      tenant: string,
      stateTtlMs: number,
      release: string,
    ): Result<number, Context>;
    /** enqueue-5.lua: five keys, most pending (messages, bytes), then msg id, body pairs; `[added, dropped, waiting]` or `[-1, 0, 0]`. */
    whEnqueue(
      ...args: Array<string | number>
    ): Result<[added: number, dropped: number, waiting: number], Context>;
    /** claim-5.lua: `['gone']`, `['disabled']`, or `'ok'`, next, url, secret, tenant, then 4 fields a message. */
    whClaim(
      meta: string,
      queue: string,
      payloads: string,
      attempts: string,
      inflight: string,
      leaseMs: number,
      concurrency: number,
      max: number,
    ): Result<[kind: 'gone' | 'disabled'] | [kind: 'ok', ...fields: Array<string | number>], Context>;
    /** settle-7.lua: the outcome, the next due ms (-1: none) and Redis's now (ms). */
    whSettle(
      ...args: [
        meta: string,
        queue: string,
        payloads: string,
        attempts: string,
        inflight: string,
        log: string,
        settled: string,
        msgId: string,
        ok: string,
        retryDelayMs: number,
        retryForMs: number,
        disableAfterMs: number,
        entry: string,
        logMax: number,
        settledKeepMs: number,
        settledMax: number,
      ]
    ): Result<[outcome: Outcome, next: string, now: string], Context>;
    /** due-now-1.lua: the endpoint due now (Redis's clock); 1. */
    whDueNow(due: string, webhookId: string, mode: 'fresh' | 'NX' | 'LT'): Result<number, Context>;
    /** due-read-1.lua: Redis's now, then webhook id, score pairs due by it. */
    whDueRead(due: string, offset: number, limit: number): Result<[number, ...string[]], Context>;
    /** due-set-1.lua: 1 when set, 0 when the score changed since it was read. */
    whDueSet(due: string, webhookId: string, seenScore: number, next: number): Result<number, Context>;
    /** mark-done-1.lua: 1 when dropped. */
    whMarkDone(marks: string, sessionId: string, score: number, maxScore: number): Result<number, Context>;
    /** index-add-1.lua: 1, or 0 at the tenant's limit. */
    whIndexAdd(index: string, webhookId: string, entry: string, max: number): Result<number, Context>;
    /** update.lua (a variable key count first): `['ERR', code, current?]` or `['OK', new revision]`. */
    whUpdate(
      numKeys: number,
      ...keysAndArgs: string[]
    ): Result<[status: string, codeOrRevision: string | number, current?: string], Context>;
  }
}
