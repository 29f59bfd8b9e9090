/**
 * The tenants' session indexes: each tenant's sessions by creation time (one sorted set, paged by member), the
 * metadata pairs' indexes beside it (metadata-index.ts), and the list of a tenant's sessions read through them.
 * The sessions themselves are the store's (store.ts); a list reads their meta hashes and decodes them with the
 * store's decoder.
 *
 * Over 400 lines: an entry is written with its session, read by the list and repaired (by the list's drop of a stale
 * entry, and by the sweep of deletes a killed replica left under way) against one rule of what an entry without its
 * session means; the three stay here so that rule is written once.
 */
import { setImmediate as turn } from 'node:timers/promises';
import { InvalidRequest } from '../errors.js';
import { heavyStep } from '../tenant-turns.js';
import { sessionKeys, tenantIndexKey } from './keys.js';
import type { RedisClient } from './lua-commands.js';
import {
  MetadataIndex,
  matchesMetadata,
  metadataHashKey,
  metadataIndexKey,
  metadataPairs,
  pairHash,
  type MetadataPair,
} from './metadata-index.js';
import { HEAD_FIELDS, VIEW_FIELDS, type SessionState, type Status } from './session-state.js';
import { isOutOfMemory } from './unavailable.js';

/** How old an index entry without its session must be before a list drops it (ms): older than any create's write. */
const INDEX_GRACE_MS = 60_000;

/**
 * ZSET of the sessions' deletes under way, each member the index entries of one session (`unindexMark`), scored by
 * when the delete began (ms of Redis's clock, the store's reckoning). A session's index entries (its tenant index's and
 * its metadata pairs') are in its tenant's hash slot, its keys in its own, so its delete's script cannot drop them: they
 * are dropped after it, in commands of their own, and a process killed between the two left them for ever (no expiry;
 * a metadata pair's entries are dropped by a list only if one filters on that pair, pages past them and finds them
 * dead). So the delete writes this mark first and drops it once the entries are gone, and any replica's retention sweep
 * (`sweepDeletes`) drops the entries of a mark whose session is gone (and gives back its bytes first: store.ts
 * `giveBackLeft`). Global, written in its own commands, as the run queue is.
 */
const UNINDEX_KEY = 'sessions:unindex';

/**
 * A mark whose session is still there this long after the delete began (ms) is dropped: that delete never landed (its
 * process died before its script, or its script failed), and the entries are the live session's. Far longer than the
 * few commands between a mark and its delete's script.
 */
const UNINDEX_GRACE_MS = 5 * 60_000;

/** Most marks one sweep looks at. */
const UNINDEX_SWEEP_LIMIT = 100;

/** What a delete's mark names: the session, its tenant, its creation time and its metadata pairs' hashes (pairHash). */
interface UnindexEntry {
  id: string;
  tenant: string;
  createdAt: number;
  pairs: string[];
}

/** The mark of `e` in UNINDEX_KEY: its JSON, `[id, tenant, created at, [pair hash…]]` (at most 32 pairs of 32 digits). */
const unindexMark = (e: UnindexEntry) => JSON.stringify([e.id, e.tenant, e.createdAt, e.pairs]);

/** The entry a mark names; null for one of another form. */
function unindexEntry(mark: string): UnindexEntry | null {
  try {
    const v: unknown = JSON.parse(mark);
    if (!Array.isArray(v) || v.length !== 4) return null;
    const [id, tenant, createdAt, pairs] = v as unknown[];
    if (typeof id !== 'string' || typeof tenant !== 'string' || typeof createdAt !== 'number') return null;
    if (!Array.isArray(pairs) || !pairs.every((p) => typeof p === 'string' && /^[0-9a-f]{32}$/.test(p)))
      return null;
    return { id, tenant, createdAt, pairs: pairs as string[] };
  } catch {
    return null;
  }
}

/** A list page yields the event loop after measuring a session this large (see `list`). */
export const LIST_YIELD_BYTES = 64 * 1024;

/** Bytes of a view's fields as read (`readView`): what decoding them costs, near enough. */
function pairsBytes(pairs: readonly Buffer[]): number {
  let n = 0;
  for (const b of pairs) n += b.length;
  return n;
}

/** A view's fields as read (field, value, … as bytes), as text. */
function textOf(pairs: readonly Buffer[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < pairs.length; i += 2)
    out[pairs[i]!.toString('utf8')] = pairs[i + 1]!.toString('utf8');
  return out;
}

/** HMGET's reply for `fields`, as a hash (absent fields left out). */
function hashOf(fields: readonly string[], values: ReadonlyArray<string | null>): Record<string, string> {
  const out: Record<string, string> = {};
  fields.forEach((f, i) => {
    const v = values[i];
    if (v !== null && v !== undefined) out[f] = v;
  });
  return out;
}

/**
 * How many sessions of a list round to read next: `left` not read yet, `read` read so far (kept or dropped: gone,
 * another tenant's, filtered out), `measured` of them kept and measured into the page's `bytes`. Without a byte
 * bound, all. With one, while none is measured, as many as were read (two first: 2, 2, 4, 8, …), so leading dropped
 * sessions neither make one round of the rest nor a round trip each; then as many as the room left holds at the size
 * of those measured (at least one): a page of 400 kB sessions reads the three it needs (two sent, one over the
 * bound), not the whole round of 100 — each read is a session's view decoded on the event loop (~5 ms of CPU for a
 * 400 kB one). A page of small sessions costs one round trip more than reading them all at once. `bytes` is what the
 * caller sizes rounds by: of each session measured, the larger of its view and what was read of it.
 */
export function listChunk(
  left: number,
  read: number,
  measured: number,
  bytes: number,
  bound?: { maxBytes: number },
): number {
  if (!bound) return left;
  if (measured === 0 || bytes === 0) return Math.min(left, Math.max(2, read));
  const room = Math.max(0, bound.maxBytes - bytes);
  return Math.min(left, Math.max(1, Math.ceil(room / (bytes / measured))));
}

export class SessionIndex {
  /** The tenants' metadata pairs → sessions (metadata-index.ts), for `metadata.<key>` list filters. */
  readonly metadata: MetadataIndex;

  constructor(
    private readonly redis: RedisClient,
    /** A meta hash (HGETALL's reply) as the store decodes it; null for one that is not a session's. */
    private readonly decode: (h: Record<string, string>) => SessionState | null,
    /**
     * Redis's now (the store's `clock.now()`), the clock of the members' creation times (create.ts), which a list's
     * INDEX_GRACE_MS is counted in: with a replica's own, one ahead by more than the grace dropped the entry of a
     * create whose write was still on its way (the session then never listed).
     */
    private readonly now: () => number,
  ) {
    this.metadata = new MetadataIndex(redis);
  }

  /**
   * One session read as a list page of `tenant`'s reads it (see `list`), for its view only (`readView`). Null for a
   * session that is not there.
   */
  async loadForPage(id: string, tenant: string): Promise<SessionState | null> {
    return (await this.readView(id, tenant)).state;
  }

  /**
   * The fields of a session's view (VIEW_FIELDS, list-view-fields-1.lua), not its whole meta hash: the step a session
   * runs holds its calls' inputs (a MB each once edited at approval), which a list of 100 such sessions read whole,
   * 100 MB a round of a status filter's scan, for views that do not show them. The step is read only while the
   * session is `requires_action`, when its view shows it, and not by the script (`withStep`). Read as bytes, and a
   * large read is decoded as a heavy step of the tenant's (tenant-turns.ts), not together with every other read whose
   * reply came in the same turn of the event loop. `bytes`: what was read (the size a list's rounds are reckoned by).
   */
  private async readView(id: string, tenant: string): Promise<{ state: SessionState | null; bytes: number }> {
    const meta = sessionKeys(id).meta;
    const [fields, step] = await this.redis.sessListViewFieldsBuffer(meta, ...VIEW_FIELDS);
    const pairs = step.length ? await this.withStep(meta, fields, step) : fields;
    const bytes = pairsBytes(pairs);
    if (bytes >= LIST_YIELD_BYTES) {
      const wait = heavyStep(tenant);
      if (wait) await wait;
    }
    return { state: this.decode(textOf(pairs)), bytes };
  }

  /**
   * A view's fields (`fields`, as the script read them) with the values of its step's fields (`step`, named by the
   * script): `pending` and its `result:*`, up to MAX_TURN_BYTES and BODY_LIMIT per edited input, read by a plain HMGET,
   * which Redis answers from the hash as it is, where a script's read copies each value into its Lua and its reply
   * again while Redis serves no other tenant. Read with the revision: the same as the script's, nothing was written
   * between (every write of the step, its results and its status moves it: apply-8.lua), and the step is that of the
   * status read. Else the session moved between the two reads (a decision, a result, the run), and it is read whole
   * in one HGETALL (not a script): the view of one moment, at the cost of a GET of the session, for a race.
   */
  private async withStep(meta: string, fields: Buffer[], step: readonly Buffer[]): Promise<Buffer[]> {
    const names = step.map((b) => b.toString('utf8'));
    const [revision, ...values] = await this.redis.hmgetBuffer(meta, 'revision', ...names);
    const at = fields.findIndex((b, i) => i % 2 === 0 && b.toString('utf8') === 'revision');
    const read = at >= 0 ? fields[at + 1] : undefined;
    if (revision && read && revision.equals(read)) {
      const out = [...fields];
      values.forEach((v, i) => {
        if (v) out.push(step[i]!, v);
      });
      return out;
    }
    return Object.entries(await this.redis.hgetallBuffer(meta)).flatMap(([k, v]) => [Buffer.from(k), v]);
  }

  /** Index members sort by creation time then id, so a lexicographic range pages the list exactly. */
  member(createdAt: number, id: string): string {
    return `${String(createdAt).padStart(15, '0')}:${id}`;
  }

  /** Lists the session in its tenant's index, and under each of its metadata pairs (`metadata`). */
  async add(
    tenant: string,
    id: string,
    createdAt: number,
    metadata: Record<string, unknown> = {},
  ): Promise<void> {
    const member = this.member(createdAt, id);
    await Promise.all([
      this.redis.zadd(tenantIndexKey(tenant), 0, member),
      this.metadata.add(tenant, member, metadataPairs(metadata)),
    ]);
  }

  /** How many sessions `tenant` keeps (its index: one ZCARD). */
  count(tenant: string): Promise<number> {
    return this.redis.zcard(tenantIndexKey(tenant));
  }

  async remove(tenant: string, id: string, createdAt: number): Promise<void> {
    await this.redis.zrem(tenantIndexKey(tenant), this.member(createdAt, id));
  }

  /**
   * Before a delete of the session: its mark (UNINDEX_KEY), so that its index entries (of its tenant and of the pairs
   * of `metadata`) are dropped whatever becomes of the process deleting it. Given back to `unindex` once the delete
   * landed, or to `undelete` when it did not.
   */
  async deleting(
    tenant: string,
    id: string,
    createdAt: number,
    metadata: Record<string, unknown>,
  ): Promise<string> {
    const mark = unindexMark({ id, tenant, createdAt, pairs: metadataPairs(metadata).map(pairHash) });
    // Redis full (noeviction) refuses the ZADD: the delete goes on without its mark (a delete must work then, it frees
    // memory), its entries dropped after it as they were before marks.
    await this.redis.zadd(UNINDEX_KEY, this.now(), mark).catch((err: unknown) => {
      if (!isOutOfMemory(err)) throw err;
    });
    return mark;
  }

  /**
   * After the session's delete: its index entries are dropped, then its mark (none: an entry of `deleting`'s form),
   * unless `keepMark` (what the delete owes its tenant's storage count is left to the sweep: `sweepDeletes`).
   */
  async unindex(mark: string, keepMark = false): Promise<void> {
    const e = unindexEntry(mark);
    if (e) {
      const member = this.member(e.createdAt, e.id);
      await Promise.all([
        this.redis.zrem(tenantIndexKey(e.tenant), member),
        ...e.pairs.map((p) => this.redis.zrem(metadataHashKey(e.tenant, p), member)),
      ]);
    }
    if (!keepMark) await this.redis.zrem(UNINDEX_KEY, mark);
  }

  /** The delete did not happen (a write came first): only its mark is dropped. */
  async undelete(mark: string): Promise<void> {
    await this.redis.zrem(UNINDEX_KEY, mark);
  }

  /**
   * The repair of deletes whose process died after their script (UNINDEX_KEY), run by every replica's retention
   * sweep: the oldest marks, each one's session read (its `created_at`); gone, or another session of the same id (a
   * deterministic id made again), its delete landed and its entries are dropped (`unindex`: its own process may be
   * doing it too, ZREM twice is harmless); still there, the delete is under way or never landed, and the mark is left,
   * or dropped once older than UNINDEX_GRACE_MS. `now`: Redis's clock (ms), the marks'. `landed`: run first for a
   * delete that landed (the store gives back what it owes its tenant's storage count: the mark outlives that); one
   * refused for memory (Redis full) leaves the mark to a later pass.
   */
  async sweepDeletes(now: number, landed: (id: string) => Promise<void> = async () => {}): Promise<void> {
    const rows = await this.redis.zrange(UNINDEX_KEY, 0, UNINDEX_SWEEP_LIMIT - 1, 'WITHSCORES');
    for (let i = 0; i + 1 < rows.length; i += 2) {
      const mark = rows[i]!;
      const e = unindexEntry(mark);
      if (!e) {
        await this.undelete(mark);
        continue;
      }
      const created = await this.redis.hget(sessionKeys(e.id).meta, 'created_at');
      if (created === null || Number(created) !== e.createdAt) {
        const left = await landed(e.id).then(
          () => false,
          (err: unknown) => {
            if (!isOutOfMemory(err)) throw err;
            return true;
          },
        );
        await this.unindex(mark, left);
      } else if (Number(rows[i + 1]) < now - UNINDEX_GRACE_MS) await this.undelete(mark);
    }
  }

  /** Undoes `add`: for a create whose write did not land (refused, or another create's id). */
  async unadd(
    tenant: string,
    id: string,
    createdAt: number,
    metadata: Record<string, unknown> = {},
  ): Promise<void> {
    await Promise.all([
      this.remove(tenant, id, createdAt),
      this.metadata.remove(tenant, this.member(createdAt, id), metadataPairs(metadata)),
    ]);
  }

  /**
   * The session an index entry stands for, or null: an entry is the session's only when its time is the session's
   * `created_at`. A create indexes before it writes, so for a moment an entry has no session yet, and a create that
   * lost the race for a deterministic id (`session_exists`) has an entry of its own time until it unindexes it.
   */
  private entryOf(member: string, s: SessionState | null): SessionState | null {
    return s && this.member(s.createdAt, s.id) === member ? s : null;
  }

  /**
   * A tenant's sessions, newest first. The cursor is the index member of the last item of the previous page.
   * Entries whose session is gone are dropped from the index on the way (once older than INDEX_GRACE_MS, so the
   * entry of a create in flight stays); a status filter reads at most 20 index
   * pages per call, so one request stays bounded. Metadata filters page the index of the narrowest pair instead
   * (metadata-index.ts), every candidate checked against the session (a stale entry is dropped). Each entry's
   * session is read in two steps: the few fields the filters need (HEAD_FIELDS), then, for those a page may show,
   * its view's fields (`readView`), never the whole hash.
   */
  async list(
    tenant: string,
    opts: {
      limit: number;
      cursor?: string | undefined;
      status?: Status | undefined;
      metadata?: readonly MetadataPair[] | undefined;
    },
    /** A page stops before the item that would take it over `maxBytes` (as `sizeOf` counts); never empty. */
    bound?: { maxBytes: number; sizeOf: (s: SessionState) => number },
  ): Promise<{ items: SessionState[]; next: string | null }> {
    const filters = opts.metadata ?? [];
    // With filters: the index of one pair (`own`), whose members that no longer have it are dropped.
    const own = filters.length ? await this.metadata.narrowest(tenant, filters) : null;
    const key = own ? metadataIndexKey(tenant, own) : tenantIndexKey(tenant);
    if (opts.cursor && !/^\d{15}:ses_[A-Za-z0-9]+$/.test(opts.cursor)) {
      throw new InvalidRequest('invalid_cursor', 'The cursor is not one this service gave.');
    }
    let max = opts.cursor ? `(${opts.cursor}` : '+';
    const items: SessionState[] = [];
    let lastMember: string | null = null;
    let exhausted = false;
    const pageSize = opts.status || filters.length > 1 ? 100 : opts.limit;
    let bytes = 0;
    // Sessions measured into `bytes` (those the filters keep), and what a round is sized by (`reckoned`): of each,
    // the larger of its view and what was read of it. (Rounds sized by the views alone, when a list read whole
    // hashes, read 100 sessions at once whose views were small and whose steps were 1 MB each.)
    let measured = 0;
    let reckoned = 0;
    let full = false;
    const filtered = !!opts.status || filters.length > 0;
    const headFields: readonly string[] = filters.length ? [...HEAD_FIELDS, 'metadata'] : HEAD_FIELDS;
    for (let round = 0; round < 20 && items.length < opts.limit && !full; round++) {
      const members = await this.redis.zrevrangebylex(key, max, '-', 'LIMIT', 0, pageSize);
      // With a filter, first what it needs of every entry of the round (a few small fields, one pipeline), so only
      // the sessions a page shows are read for their views: a status filter's scan of 20 rounds of 100 reads 2000
      // statuses, not 2000 sessions. An entry dropped here (gone, another status…) is as its head says. Without one,
      // every entry is read for its view.
      const heads = filtered
        ? await Promise.all(
            members.map((m) => this.redis.hmget(sessionKeys(m.slice(16)).meta, ...headFields)),
          )
        : [];
      const states: Array<SessionState | null> = heads.map((h) => this.decode(hashOf(headFields, h)));
      const wanted = members.map((m, i) => {
        if (!filtered) return true;
        const s = this.entryOf(m, states[i] ?? null);
        return !!s && (!opts.status || s.status === opts.status) && matchesMetadata(s.metadata, filters);
      });
      // Bytes read of each view read (`readView`), and the entries read for their views so far (those before `viewed`).
      const sizes: number[] = [];
      let viewed = 0;
      let views = 0;
      let read = 0;
      for (; read < members.length && items.length < opts.limit; read++) {
        if (wanted[read] && read >= viewed) {
          const left = wanted.slice(read).filter(Boolean).length;
          const n = listChunk(left, views, measured, reckoned, bound);
          const next: number[] = [];
          for (let i = read; i < members.length && next.length < n; i++) if (wanted[i]) next.push(i);
          // Read together, each decoded as a step of its own (`readView`).
          const got = await Promise.all(next.map((i) => this.readView(members[i]!.slice(16), tenant)));
          next.forEach((i, j) => {
            states[i] = got[j]!.state;
            sizes[i] = got[j]!.bytes;
          });
          viewed = next.at(-1)! + 1;
          views += next.length;
        }
        const member = members[read]!;
        const s = this.entryOf(member, states[read] ?? null);
        if (
          s &&
          bound &&
          (!opts.status || s.status === opts.status) &&
          matchesMetadata(s.metadata, filters)
        ) {
          const size = bound.sizeOf(s);
          bytes += size;
          reckoned += Math.max(size, sizes[read] ?? 0);
          measured++;
          if (bytes > bound.maxBytes && items.length > 0) {
            full = true;
            break;
          }
          // A turn of the event loop between large sessions: a page of three 400 kB sessions was decoded and
          // measured in one go (~10 ms of the loop, ahead of every other tenant's requests).
          if (size >= LIST_YIELD_BYTES) await (heavyStep(tenant) ?? turn());
        }
        lastMember = member;
        if (!s) {
          if (Number(member.slice(0, 15)) < this.now() - INDEX_GRACE_MS) await this.redis.zrem(key, member);
        } else if (own && !matchesMetadata(s.metadata, [own])) await this.redis.zrem(key, member);
        else if ((!opts.status || s.status === opts.status) && matchesMetadata(s.metadata, filters))
          items.push(s);
      }
      if (full) break;
      if (members.length < pageSize && read === members.length) {
        exhausted = true;
        break;
      }
      max = `(${lastMember}`;
    }
    // A short page with a cursor means the bounded scan stopped before the end of the index: ask again from there.
    const more = items.length === opts.limit || !exhausted || full;
    return { items, next: more && lastMember ? lastMember : null };
  }
}
