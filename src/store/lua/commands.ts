/**
 * The types of the session store's scripts (the `.lua` files beside this one), as ioredis commands: each file
 * `<name>-<n>.lua` is defined by `defineLuaCommands(redis, …, 'sess')` as `sess<Name>` (src/store/lua-commands.ts).
 * Declared here, once, by augmenting ioredis's `RedisCommander` (as bullmq does), so `Redis` and `Cluster` (and
 * their pipelines) both have them typed. Each signature is the script's contract as its header states it: keys
 * first, then arguments; the reply as the script returns it (Lua false and nil are null).
 */
import type { Result } from 'ioredis';
import type { RenameOutcome, WriteOutcome } from '../memory.js';

/** A stream entry as XRANGE gives it (and the scripts copy it): id, then field, value, … */
export type StreamEntry = [id: string, fields: string[]];

/** The keys of a session, in the order the scripts that take them all expect (src/store/store.ts `keyList`). */
export type SessionKeyList = [
  meta: string,
  msgs: string,
  iters: string,
  queue: string,
  events: string,
  lease: string,
  compacted: string,
];

declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** idem-keep-3.lua: the number of older answers forgotten to make room. */
    sessIdemKeep(
      record: string,
      kept: string,
      bytes: string,
      json: string,
      ttlS: number,
      now: number,
      maxBytes: number,
    ): Result<number, Context>;
    /** idem-release-1.lua: 1 when the pending record was the owner's (deleted, or replaced by `next`), else 0. */
    sessIdemRelease(record: string, owner: string, next: string, ttlMs: number): Result<number, Context>;
    /**
     * apply-8.lua: `['ERR', code, detail]`, or revision, merged count, appended blocks (JSON, or ''), into_last,
     * control, params_rev, and the bytes the script counted of what the change rewrote (its Storage; negative: given
     * back).
     */
    sessApply(
      ...args: [
        ...keys: SessionKeyList,
        stage: string,
        guard: string,
        ops: string,
        eventLogMax: number,
        channel: string,
        noticeMaxBytes: number,
        eventLogMaxBytes: number,
      ]
    ): Result<
      [err: 'ERR', code: string, detail: string] | [number, number, string, number, string, string, number],
      Context
    >;
    /**
     * acquire-run-4.lua: 0, or the fencing token, the session's fields but its step's (flat), its queue length, its
     * last record, and 1 when it holds a pending step (not read), else 0.
     */
    sessAcquireRun(
      meta: string,
      lease: string,
      queue: string,
      iters: string,
      owner: string,
      ttlMs: number,
    ): Result<0 | [number, string[], number, string | null, 0 | 1], Context>;
    /** renew-1.lua: 1 when renewed. */
    sessRenew(lease: string, token: string, ttlMs: number): Result<number, Context>;
    /** release-2.lua: 1 when released; drops `spend_open` while it holds seq `spentSeq` ('' : none). */
    sessRelease(lease: string, meta: string, token: string, spentSeq: string): Result<number, Context>;
    /** due-read-1.lua: Redis's now, then member, score pairs due by it. */
    sessDueRead(due: string, limit: number): Result<[number, ...string[]], Context>;
    /** run-due-set-1.lua: the run's due time set, `inMs` from Redis's now (ms, Redis's clock). */
    sessRunDueSet(due: string, id: string, inMs: number): Result<number, Context>;
    /** run-due-drop-1.lua: 1 when the entry held `at` and was dropped, else 0. */
    sessRunDueDrop(due: string, id: string, at: number): Result<number, Context>;
    /** run-due-read-1.lua: the ids due by Redis's now, oldest first. */
    sessRunDueRead(due: string, limit: number): Result<string[], Context>;
    /**
     * destroy-11.lua: [1, its `bytes` as deleted, the id of its `session.deleted` (its field in `giveBack`, when
     * `bytes` is not 0)] when the session existed (its segment keys deleted with it), [0, 0] when not, [-1, 0] when it
     * moved past the revision given.
     */
    sessDestroy(
      ...args: [
        ...keys: SessionKeyList,
        tokens: string,
        gone: string,
        segmentPrefix: string,
        giveBack: string,
        deletedEvent: string,
        ttlMs: number,
        channel: string,
        revision: string,
        tenant: string,
        giveBackTtlMs: number,
      ]
    ): Result<[1, number, string] | [0 | -1, 0], Context>;
    /**
     * storage-give-back-2.lua: 1 when the delete's bytes were taken off the count, 0 when given back before, -1 when
     * the delete is too old to tell (nothing given back).
     */
    sessStorageGiveBack(
      bytesKey: string,
      givenKey: string,
      deleted: string,
      bytes: number,
      at: number,
      keepMs: number,
    ): Result<1 | 0 | -1, Context>;
    /**
     * segment-if-fits-1.lua: the kept segment at `index` if it has at most `most` bytes and its `at_iteration` is
     * past `after`, else -1 (not past `after`) or its byte length; a stub (a segment kept in a key of its own)
     * as it is when the length it names fits.
     */
    sessSegmentIfFitsBuffer(
      compacted: string,
      index: number,
      most: number,
      after: number,
    ): Result<Buffer | number | null, Context>;
    /**
     * segments-page-1.lua: the list's length, then the kept segments from `first` on, at most `segments` (1–256) of
     * them, while together within `most` bytes (the first one's byte length instead, when it alone is over).
     */
    sessSegmentsPageBuffer(
      compacted: string,
      first: number,
      most: number,
      segments: number,
    ): Result<[length: number, ...segments: Array<Buffer | number>], Context>;
    /** segment-part-1.lua: at most `most` bytes of kept segment `index` from byte `from`; null past the list's end. */
    sessSegmentPartBuffer(
      compacted: string,
      index: number,
      from: number,
      most: number,
    ): Result<Buffer | null, Context>;
    /** due-settle-1.lua: 1 when the member still had the score read and was moved (or dropped). */
    sessDueSettle(key: string, member: string, score: string, next: string): Result<number, Context>;
    /**
     * tree-due-3.lua: due `inMs` from Redis's now; 1 when the member's score was written (XX: it was a member; NX: it
     * was not; LT: it was a member due later).
     */
    sessTreeDue(
      due: string,
      tenants: string,
      tenantOf: string,
      member: string,
      inMs: number,
      tenant: string,
      mode: '' | 'XX' | 'NX' | 'LT',
    ): Result<number, Context>;
    /**
     * tree-due-settle-3.lua: moved to `inMs` from Redis's now ('': dropped); 1 when the member still had the score
     * read and was moved (or dropped).
     */
    sessTreeDueSettle(
      due: string,
      tenants: string,
      tenantOf: string,
      member: string,
      score: string,
      inMs: string,
      tenant: string,
    ): Result<number, Context>;
    /** tree-due-read-1.lua: Redis's now (ms, to the microsecond, as text), then the tenants with members due by it. */
    sessTreeDueRead(tenants: string, limit: number): Result<[string, ...string[]], Context>;
    /** due-add-1.lua: the member's score now (`in`: `at` is ms from Redis's now). */
    sessDueAdd(key: string, member: string, at: number, mode?: '' | 'in'): Result<number, Context>;
    /** client-token-mint-2.lua: [1 stored | 0 no session | -1 too many tokens, bytes added to the session's `bytes`]. */
    sessClientTokenMint(
      ...args: [
        meta: string,
        tokens: string,
        hash: string,
        id: string,
        record: string,
        keepUntil: number,
        now: number,
        max: number,
        graceMs: number,
        eventBytes: number,
      ]
    ): Result<[code: number, added: number], Context>;
    /** client-token-revoke-2.lua: [1 when removed | 0, bytes added to the session's `bytes` (negative: given back)]. */
    sessClientTokenRevoke(
      meta: string,
      tokens: string,
      id: string,
      eventBytes: number,
    ): Result<[code: number, added: number], Context>;
    /** append-events-2.lua: meta, events, then channel, max, now, notice bytes, max bytes, and type, data pairs. */
    sessAppendEvents(...args: Array<string | number>): Result<string, Context>;
    /** tool-retried-2.lua: 1 when the event was written, 0 when it was before (or the call is no longer awaited). */
    sessToolRetried(
      ...args: [
        meta: string,
        events: string,
        channel: string,
        eventLogMax: number,
        now: number,
        noticeMaxBytes: number,
        eventLogMaxBytes: number,
        toolUseId: string,
        round: number,
        attempt: number,
        type: string,
        data: string,
      ]
    ): Result<number, Context>;
    /** append-events-many.lua: numkeys, meta and events of each session, then max, now, notice bytes, max bytes, and per session channel, count, type, data pairs. */
    sessAppendEventsMany(...args: Array<string | number>): Result<number, Context>;
    /**
     * run-slot-take-1.lua: 1 when the slot was taken; else the slots older than `graceMs` by Redis's clock (session
     * id, score, …).
     */
    sessRunSlotTake(key: string, id: string, graceMs: number, max: number): Result<1 | string[], Context>;
    /** run-slot-hold-1.lua: the session's slot dated Redis's now, taken again if it was not held (then 1). */
    sessRunSlotHold(key: string, id: string): Result<number, Context>;
    /** run-slot-prune-1.lua: the key, then session id, score pairs read as stale. */
    sessRunSlotPrune(key: string, ...memberScores: string[]): Result<number, Context>;
    /** child-usage-1.lua: 1 when the child's usage was counted now, 0 when before (or the parent is gone). */
    sessChildUsage(meta: string, child: string, ...incr: Array<string | number>): Result<number, Context>;
    /** read-events-2.lua: the oldest and newest ids (null: empty log), the newest trimmed (null: none recorded), then the page's entries. */
    sessReadEvents(
      events: string,
      meta: string,
      start: string,
      max: number,
      budget: number,
    ): Result<
      [oldest: string | null, newest: string | null, cut: string | null, ...entries: StreamEntry[]],
      Context
    >;
    /** newest-id-2.lua: the log's newest id (null: empty or gone). */
    sessNewestId(events: string, meta: string): Result<string | null, Context>;
    /** memory-write-2.lua. */
    sessMemoryWrite(
      files: string,
      bytes: string,
      path: string,
      content: string,
      expected: string,
      maxFileBytes: number,
      maxTenantBytes: number,
      maxFiles: number,
    ): Result<WriteOutcome, Context>;
    /** memory-remove-2.lua: how many files were removed. */
    sessMemoryRemove(files: string, bytes: string, path: string, fileOnly: string): Result<number, Context>;
    /** memory-rename-2.lua. */
    sessMemoryRename(
      files: string,
      bytes: string,
      from: string,
      to: string,
      maxPathChars: number,
      maxDepth: number,
    ): Result<RenameOutcome, Context>;
    /** memory-list-1.lua: path, bytes, path, bytes, … */
    sessMemoryList(files: string, prefix: string): Result<Array<string | number>, Context>;
    /**
     * list-view-fields-1.lua: field, value, … of the session's view (`fields` and the `u_st_*` counts) but its step,
     * and the names of the step's fields (`pending`, its `result:*`) while it shows it (`requires_action`), else none;
     * as bytes, so a list decodes each in its own step.
     */
    sessListViewFieldsBuffer(meta: string, ...fields: string[]): Result<[Buffer[], Buffer[]], Context>;
  }
}
