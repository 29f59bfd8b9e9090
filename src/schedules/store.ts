/**
 * Every read and write of the schedules' keys (records, the due set, the tenants' indexes, a fire's claim and its
 * session) behind one door, as src/store/store.ts is for sessions. Past 400 lines for that reason: the guards of
 * a fire's exactly-once (revision, due score, claim) are each written once, here.
 */
import { withoutSecrets } from '../sessions/secrets.js';
import { RevisionMismatch, NotFound, InvalidRequest } from '../errors.js';
import { channelName, eventsChannel } from '../store/keys.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import { setImmediate as turn } from 'node:timers/promises';
import { heavyStep } from '../tenant-turns.js';
import { LIST_YIELD_BYTES, listChunk } from '../store/session-index.js';
import type { SessionState } from '../store/session-state.js';
import { EVENT_LOG_MAX_BYTES, NOTICE_MAX_BYTES, type SessionStore } from '../store/store.js';
import {
  decodeSchedule,
  dueScore,
  encodeSchedule,
  SCHEDULES_ALIVE_KEY,
  SCHEDULES_DUE_KEY,
  scheduleKeys,
  tenantSchedulesKey,
  type ScheduleRecord,
} from './keys.js';
import './lua/commands.js';
import { ScheduleCharges } from './charges.js';
import { isOutOfMemory } from '../store/unavailable.js';

/** Sessions kept in a schedule's runs list (the newest). */
const RUNS_MAX = 1000;

const scheduleNotFound = () => new NotFound('schedule');

/** `schedule.created`'s data: the schedule's timing and options (the create body it keeps is not repeated). */
const createdData = (s: ScheduleRecord) => ({
  schedule_id: s.id,
  cron: s.cron,
  at: s.at === null ? null : new Date(s.at).toISOString(),
  timezone: s.timezone,
  overlap: s.overlap,
  paused: s.paused,
  next_run_at: s.nextRunAt === null ? null : new Date(s.nextRunAt).toISOString(),
});

/** A retiming lost the race with a fire's claim (the revision is unchanged): computed again from the record now. */
export class FireRaced extends RevisionMismatch {}

/** Times a schedule's due entry is filed again after another look moved it meanwhile (`resync`). */
const RESYNC_ATTEMPTS = 8;

/** How long an index entry without its record is kept: the moment of a create in flight (written index first). */
const INDEX_GRACE_MS = 60_000;

/**
 * The schedules' door to Redis (keys in keys.ts). Every method is one command or one script unless it says in
 * which order its steps go. Writes of events go through the session store's event tap, so webhooks see them.
 */
export class ScheduleStore {
  /** The create bodies' bytes in their tenants' storage (TENANT_MAX_BYTES). */
  private readonly charges: ScheduleCharges;

  constructor(
    private readonly redis: RedisClient,
    private readonly sessions: SessionStore,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sched');
    this.charges = new ScheduleCharges(redis, sessions);
  }

  private indexMember(s: ScheduleRecord): string {
    return `${String(s.createdAt).padStart(15, '0')}:${s.id}`;
  }

  /**
   * Writes a new schedule: index and due entry first, then the record with its `schedule.created` event (one
   * script). The other order could leave, after a crash between the two, a schedule that fires for ever but is never
   * listed nor counted; this one leaves at most entries without a record, dropped when met (the index's once older
   * than INDEX_GRACE_MS: a create in flight keeps its own). The index entry comes with the charge of the create
   * body in the tenant's storage (charge-3.lua, charges.ts: settled to the record after it, by the sweep should this
   * process die first): 429 `quota_exceeded` beyond `maxPerTenant` or TENANT_MAX_BYTES, counted and listed in one
   * script, so concurrent creates cannot all pass a count read before their adds. False, nothing written, when a
   * schedule of this id exists (a keyed create sent twice at once).
   */
  async create(s: ScheduleRecord, maxPerTenant: number): Promise<boolean> {
    const member = this.indexMember(s);
    const charge = () =>
      this.charges.charge(s.tenant, s.id, Buffer.byteLength(s.session), {
        listing: { member, max: maxPerTenant },
      });
    return this.charges.within(s.tenant, s.id, charge, async () => {
      const score = dueScore(s);
      if (score !== null) await this.redis.zadd(SCHEDULES_DUE_KEY, score, s.id);
      const k = scheduleKeys(s.id);
      const [channel, max, notice, bytes] = this.logArgs(s.id);
      const made = await this.withTap(s, ['schedule.created'], () =>
        this.redis.schedCreate(
          k.meta,
          k.events,
          s.createdAt,
          JSON.stringify(createdData(s)),
          channel,
          max,
          notice,
          bytes,
          ...Object.entries(encodeSchedule(s)).flat(),
        ),
      );
      if (made === 1) return true;
      await this.unlist(s, member);
      return false;
    });
  }

  /**
   * Drops a create's index entry that did not become a schedule, unless the schedule of that id holds it: the same
   * member when two creates of one key were made in the same millisecond.
   */
  private async unlist(s: ScheduleRecord, member: string): Promise<void> {
    const other = await this.read(s.id);
    if (!other || this.indexMember(other) !== member)
      await this.redis.zrem(tenantSchedulesKey(s.tenant), member);
  }

  /** Lists `s` in its tenant's index again (the same member: a no-op when it is listed). */
  async relist(s: ScheduleRecord): Promise<void> {
    await this.redis.zadd(tenantSchedulesKey(s.tenant), 0, this.indexMember(s));
  }

  async read(id: string): Promise<ScheduleRecord | null> {
    return decodeSchedule(id, await this.redis.hgetall(scheduleKeys(id).meta));
  }

  /** The tenant's schedule, or 404 `schedule_not_found` (also for another tenant's). */
  async get(tenant: string, id: string): Promise<ScheduleRecord> {
    const s = await this.read(id);
    if (!s || s.tenant !== tenant) throw scheduleNotFound();
    return s;
  }

  /**
   * Changes fields (If-Match: `revision`) and logs `schedule.updated` with `changes` (`fields` given, their values;
   * one script), then puts the
   * schedule's due entry where the record says.
   */
  async update(
    s: ScheduleRecord,
    set: Record<string, string>,
    del: string[],
    changes: Record<string, unknown>,
    revision?: number,
  ): Promise<ScheduleRecord> {
    const { id, tenant } = s;
    const k = scheduleKeys(id);
    const write = async (fields: Record<string, string>) => {
      const [code, rev] = await this.withTap(s, ['schedule.updated'], () =>
        this.redis.schedUpdate(
          k.meta,
          k.events,
          tenant,
          revision === undefined ? '' : String(revision),
          JSON.stringify(fields),
          JSON.stringify(del),
          this.sessions.clock.now(),
          JSON.stringify({ schedule_id: id, ...withoutSecrets(changes) }),
          ...this.logArgs(id),
          // A retiming holds to the next fire it was computed from (a claim moves it without a new revision).
          'next_run_at' in set || del.includes('next_run_at') ? String(s.nextRunAt ?? '') : '-',
        ),
      );
      if (code === 0) throw scheduleNotFound();
      if (code === -1) throw new RevisionMismatch(rev, 'schedule');
      if (code === -2) throw new FireRaced(rev, 'schedule');
    };
    // A new create body changes what the tenant stores (charges.ts): more is charged before the write (429 past
    // TENANT_MAX_BYTES), and the count settled to the record after it (less given back, a refused write's charge).
    // A record from before the ledger is adopted into it, and marked, at its first write through it.
    const body = set['session'];
    const legacy = s.charged ? null : s.session.length;
    if (body === undefined && legacy === null) await write(set);
    else
      await this.charges.within(
        tenant,
        id,
        () =>
          this.charges.charge(tenant, id, body === undefined ? null : Buffer.byteLength(body), { legacy }),
        () => write({ ...set, charged: '1' }),
      );
    const retimed = 'next_run_at' in set || del.includes('next_run_at') || 'paused' in set;
    return this.resync(id, retimed).then((s) => s ?? Promise.reject(scheduleNotFound()));
  }

  /**
   * Deletes the schedule's record and runs (If-Match: `revision`); its event log keeps a `schedule.deleted` event
   * for `deletedLogTtlMs` (one script), so webhooks and readers of the log learn of it. Then its index and due
   * entries. The sessions it created are kept.
   */
  async remove(tenant: string, id: string, revision?: number): Promise<void> {
    const s = await this.get(tenant, id);
    const k = scheduleKeys(id);
    const [channel, , notice] = this.logArgs(id);
    // Its bytes are given back by the settle after the delete (charges.ts), by the sweep should this process die
    // first. A record from before the ledger is adopted into it first (on a full Redis it cannot be: its bytes then
    // stay counted, an upper bound, and the delete goes on).
    const adopt = s.charged
      ? null
      : () =>
          this.charges.charge(tenant, id, null, { legacy: s.session.length }).catch((err: unknown) => {
            if (!isOutOfMemory(err)) throw err;
          });
    await this.charges.within(tenant, id, adopt, async () => {
      const [code, rev] = await this.withTap(s, ['schedule.deleted'], () =>
        this.redis.schedDelete(
          k.meta,
          k.events,
          k.runs,
          k.fanout,
          tenant,
          revision === undefined ? '' : String(revision),
          this.sessions.clock.now(),
          JSON.stringify({ schedule_id: id }),
          this.sessions.options.deletedLogTtlMs ?? 60_000,
          channel,
          notice,
        ),
      );
      if (code === 0) throw scheduleNotFound();
      if (code === -1) throw new RevisionMismatch(rev, 'schedule');
    });
    await Promise.all([
      this.redis.zrem(tenantSchedulesKey(tenant), this.indexMember(s)),
      this.redis.zrem(SCHEDULES_DUE_KEY, id),
    ]);
  }

  /**
   * The sweep of the schedules' byte charges (charges.ts `settleDue`): settles the schedules whose write left its
   * intent due by `now` (its process died between its steps).
   */
  settleCharges(now = this.sessions.clock.now()): Promise<void> {
    return this.charges.settleDue(now);
  }

  /**
   * A page of the tenant's schedules, newest first; the cursor is the index member of the previous page's last. A
   * page stops before the schedule that would take its `session` bodies past `maxBytes` (never empty): a schedule
   * holds a whole create body, so `limit` alone does not bound the answer.
   */
  async list(
    tenant: string,
    limit: number,
    cursor: string | undefined,
    maxBytes: number,
  ): Promise<{ items: ScheduleRecord[]; next: string | null }> {
    if (cursor && !/^\d{15}:sch_[A-Za-z0-9]+$/.test(cursor))
      throw new InvalidRequest('invalid_cursor', 'The cursor is not one this service gave.');
    const key = tenantSchedulesKey(tenant);
    const members = await this.redis.zrevrangebylex(key, cursor ? `(${cursor}` : '+', '-', 'LIMIT', 0, limit);
    const items: ScheduleRecord[] = [];
    let bytes = 0;
    for (const [i, m] of members.entries()) {
      const s = await this.read(m.slice(16));
      if (!s || s.tenant !== tenant) {
        if (Number(m.slice(0, 15)) < this.sessions.clock.now() - INDEX_GRACE_MS)
          await this.redis.zrem(key, m);
        continue;
      }
      bytes += s.session.length;
      if (bytes > maxBytes && items.length > 0) return { items, next: members[i - 1]! };
      items.push(s);
    }
    return { items, next: members.length === limit ? members.at(-1)! : null };
  }

  /**
   * Ids of schedules due by Redis's now, oldest first, and that now (due-1.lua): due scores are fire times and
   * pending leases of Redis's clock, so a replica whose clock is off neither looks early nor late.
   */
  async due(count: number): Promise<{ now: number; ids: string[] }> {
    const sent = Date.now();
    const [now, ...ids] = await this.redis.schedDue(SCHEDULES_DUE_KEY, count);
    // This process's reckoning of Redis's clock (the scheduler's, the routes' next_run_at, action deadlines).
    this.sessions.clock.observe(Number(now), sent);
    return { now: Number(now), ids };
  }

  /** The tenant of each schedule (null: gone), one HGET each. */
  tenantsOf(ids: string[]): Promise<Array<string | null>> {
    return Promise.all(ids.map((id) => this.redis.hget(scheduleKeys(id).meta, 'tenant')));
  }

  /**
   * alive-1.lua: records a beat of this replica's scheduler (Redis's clock); since when replicas have run without a
   * `gapMs` gap.
   */
  alive(gapMs: number): Promise<number> {
    return this.redis.schedAlive(SCHEDULES_ALIVE_KEY, gapMs);
  }

  /**
   * Puts the schedule's due entry where its record says (or drops it); the record, or null when it is gone.
   *
   * The entry is read before the record and written only if it still has the score read (due-set-1.lua, as the
   * session due sets' `settle`; the record and the due set may be in different slots, so no one script reads both).
   * A look that read the record before another write (a fire ended by another replica, a PATCH's retiming) and whose
   * write came after that write's own filing found the entry moved and leaves it: written blind, it put back the time
   * the record had (a pending fire's lease, 10 s on, over the next fire a second away; a PATCH's old, later time).
   * A refused write is tried again from a fresh read: the entry moved because another look filed the schedule, maybe
   * from a record older than the one read here.
   *
   * `wrote`: the caller changed the record's timing just before (a PATCH, a claim, a retake). Its filing then changes
   * the entry even when it is where the record says (1 ms earlier: an early entry costs one look, which files it
   * again), so that a look that read the entry and the record before this write fails its guard instead of putting
   * the older time back: a pause whose filing is still in flight and the resume after it, to the same next time,
   * left the pause's drop free to land.
   */
  async resync(id: string, wrote = false): Promise<ScheduleRecord | null> {
    for (let attempt = 1; ; attempt++) {
      const read = await this.redis.zscore(SCHEDULES_DUE_KEY, id);
      const s = await this.read(id);
      let next = s ? dueScore(s) : null;
      const cur = read === null ? null : Number(read);
      if (next === cur) {
        if (!wrote || next === null) return s;
        next -= 1;
      }
      const done = await this.redis.schedDueSet(
        SCHEDULES_DUE_KEY,
        id,
        read ?? '',
        next === null ? '' : String(next),
      );
      // Each refusal is another look's write landing; past RESYNC_ATTEMPTS of them, the last of those is the one
      // that read the record last.
      if (done === 1 || attempt >= RESYNC_ATTEMPTS) return s;
    }
  }

  /**
   * claim-2.lua: 'ok', or 'gone' | 'paused' | 'pending' | 'moved' (another claim, or a PATCH since `s` was read:
   * guarded by its `next_run_at` and its revision, the retiming that kept a due fire moving no `next_run_at`) |
   * 'early' (not due by Redis's clock). A fire's pending lease is `leaseMs` from Redis's now.
   */
  async claim(
    s: ScheduleRecord,
    fireAt: number,
    next: number | null,
    decision: 'fire' | 'skip',
    leaseMs: number,
    skipped: Record<string, unknown>,
  ): Promise<string> {
    const k = scheduleKeys(s.id);
    return this.withTap(s, decision === 'skip' ? ['schedule.skipped'] : [], () =>
      this.redis.schedClaim(
        k.meta,
        k.events,
        String(s.nextRunAt ?? ''),
        fireAt,
        next === null ? '' : next,
        decision,
        leaseMs,
        JSON.stringify(skipped),
        ...this.logArgs(s.id),
        s.revision,
      ),
    );
  }

  /**
   * retake-1.lua: true when the caller took over the pending fire `fireAt` (its lease was over by Redis's clock), its
   * lease now ending `leaseMs` from Redis's now.
   */
  async retake(id: string, fireAt: number, leaseMs: number): Promise<boolean> {
    return (await this.redis.schedRetake(scheduleKeys(id).meta, fireAt, leaseMs)) === 1;
  }

  /** finish-3.lua: true when this call ended the pending fire (its times Redis's clock). */
  async finish(
    s: ScheduleRecord,
    fireAt: number,
    outcome: 'fired' | 'skipped',
    sessionId: string,
    data: Record<string, unknown>,
  ): Promise<boolean> {
    const k = scheduleKeys(s.id);
    const [channel, max, notice, bytes] = this.logArgs(s.id);
    const type = outcome === 'fired' ? 'schedule.fired' : 'schedule.skipped';
    const r = await this.withTap(s, [type], () =>
      this.redis.schedFinish(
        k.meta,
        k.events,
        k.runs,
        fireAt,
        outcome,
        sessionId,
        JSON.stringify(data),
        channel,
        max,
        notice,
        bytes,
        RUNS_MAX,
      ),
    );
    return r === 1;
  }

  /**
   * A page of the sessions the schedule created (spec §7.6, `GET /v1/schedules/:id/runs`), newest fire first: the
   * runs set read before the cursor (the fire time of the last run a page went past, exclusive), `limit` members and
   * one more (which tells whether there is more, read no further).
   *
   * What a page holds: at most `limit` sessions of `tenant`, stopped before the one that would take it past
   * `bound.maxBytes` (never empty for that: a run of a 900 kB system prompt each made a page of 100 of them ~90 MB,
   * built in one go). It may hold fewer than `limit`, none even, with `next` set: a member whose session is gone
   * (deleted, or swept) or not of the tenant is dropped from the set and counts as read. `next` is null exactly when
   * no member is left after the page, so nothing is skipped and each page moves the cursor on. Sessions are read in
   * rounds sized by what is left of the bound (session-index.ts `listChunk`) and a large one is decoded as a heavy
   * step of the tenant's (`loadForPage`): a page of large runs reads the few it sends, not all `limit` of them.
   */
  async runsPage(
    id: string,
    tenant: string,
    opts: { limit: number; before?: number | undefined },
    bound: { maxBytes: number; sizeOf: (s: SessionState) => number },
  ): Promise<{ items: SessionState[]; next: number | null }> {
    const rows = await this.redis.zrevrangebyscore(
      scheduleKeys(id).runs,
      opts.before === undefined ? '+inf' : `(${opts.before}`,
      '-inf',
      'WITHSCORES',
      'LIMIT',
      0,
      opts.limit + 1,
    );
    const members: Array<{ id: string; at: number }> = [];
    for (let i = 0; i + 1 < rows.length && members.length < opts.limit; i += 2)
      members.push({ id: rows[i]!, at: Number(rows[i + 1]) });
    const more = rows.length / 2 > opts.limit;
    const items: SessionState[] = [];
    const states: Array<SessionState | null> = [];
    let bytes = 0;
    // Sessions measured into `bytes` (the kept ones): a round's size is the room left at their size; the members read
    // count the dropped ones too (with the newest runs deleted, 0 bytes for 2 read made the next round all the rest).
    let measured = 0;
    let last: number | null = null;
    for (let i = 0; i < members.length; i++) {
      if (i === states.length) {
        const n = listChunk(members.length - i, i, measured, bytes, bound);
        const read = members.slice(i, i + n).map((m) => this.sessions.index.loadForPage(m.id, tenant));
        states.push(...(await Promise.all(read)));
      }
      const s = states[i];
      if (s && s.tenant === tenant) {
        const size = bound.sizeOf(s);
        bytes += size;
        measured++;
        if (bytes > bound.maxBytes && items.length > 0) return { items, next: last };
        items.push(s);
        // A turn of the event loop between large sessions (measuring one is its view's JSON text), as a list's.
        if (size >= LIST_YIELD_BYTES) await (heavyStep(tenant) ?? turn());
      } else await this.redis.zrem(scheduleKeys(id).runs, members[i]!.id);
      last = members[i]!.at;
    }
    return { items, next: more ? last : null };
  }

  private logArgs(id: string): [string, number, number, number] {
    const o = this.sessions.options;
    return [
      channelName(this.redis, eventsChannel(id)),
      o.eventLogMax,
      NOTICE_MAX_BYTES,
      o.eventLogMaxBytes ?? EVENT_LOG_MAX_BYTES,
    ];
  }

  /** Runs a write of events of these types with the webhooks' tap around it (see src/webhooks/tap.ts). */
  private async withTap<T>(s: ScheduleRecord, types: string[], write: () => Promise<T>): Promise<T> {
    const tap = types.length ? this.sessions.eventTap?.(s.id, types, s.tenant) : undefined;
    if (tap?.ready) await tap.ready;
    const r = await write();
    tap?.landed();
    return r;
  }
}
