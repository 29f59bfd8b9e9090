import { InvalidRequest } from '../errors.js';
import type { RedisClient } from '../store/lua-commands.js';
import { listChunk } from '../store/session-index.js';
import type { SessionState } from '../store/session-state.js';
import type { SessionStore } from '../store/store.js';
import './lua/commands.js';

/** A cursor of `GET /v1/sessions/:id/children`: `<score>:<child id>` of the last member a page went past. */
const CURSOR = /^(\d{1,15}):([A-Za-z0-9_-]{1,128})$/;

/**
 * A page of a parent's children (spec §7.6, `GET /v1/sessions/:id/children`), oldest first: the children set
 * (sweep.ts `childrenKey`) in its order — the time each child's create was marked (children-mark-1.lua: Redis's clock,
 * only growing, so a child marked after a cursor was given out sorts after it), then its id; a member still at 0
 * (its create under way, or refused) comes first — read after the cursor by children-page-1.lua, `limit` members
 * and one more (which tells whether there is more, read no further). The cursor is the place of the last member the
 * page went past (`<score>:<id>`), so the next page starts after it wherever that member has moved since.
 *
 * What a page holds: at most `limit` children, of `tenant`, oldest first, stopped before the child that would take
 * it past `bound.maxBytes` (never empty for that). It may hold fewer than `limit`, none even, with `next` set: a
 * member whose session is gone (a deleted child keeps its mark, so that its call is answered as deleted), not yet
 * written (a create under way) or not of the tenant is skipped, and counts as read. So a page reads at most
 * `limit + 1` members and `limit` sessions, `next` is null exactly when no member is left after the page, and each
 * page moves the cursor on (never a page that loops). A child whose create was under way when one page went past
 * its 0 mark may show again at its time on a later page (it moves on, never back).
 */
export async function childrenPage(
  redis: RedisClient,
  store: SessionStore,
  /** The parent's children set (sweep.ts `childrenKey`). */
  key: string,
  tenant: string,
  opts: { limit: number; cursor?: string | undefined },
  bound: { maxBytes: number; sizeOf: (s: SessionState) => number },
): Promise<{ items: SessionState[]; next: string | null }> {
  let after: [string, string] = ['', ''];
  if (opts.cursor !== undefined) {
    const m = CURSOR.exec(opts.cursor);
    if (!m) throw new InvalidRequest('invalid_cursor', 'The cursor is not one this service gave.');
    after = [String(Number(m[1])), m[2]!];
  }
  const rows = await redis.agentsChildrenPage(key, after[0], after[1], opts.limit + 1);
  const members: Array<{ id: string; cursor: string }> = [];
  for (let i = 0; i + 1 < rows.length && members.length < opts.limit; i += 2)
    members.push({ id: rows[i]!, cursor: `${Number(rows[i + 1])}:${rows[i]!}` });
  const more = rows.length / 2 > opts.limit;
  const items: SessionState[] = [];
  const states: Array<SessionState | null> = [];
  let bytes = 0;
  let measured = 0;
  let last: string | null = null;
  for (let i = 0; i < members.length; i++) {
    // Read in rounds sized by what is left of the bound (session-index.ts `listChunk`): a page of large children
    // reads the few it sends, not all `limit` of them.
    if (i === states.length) {
      const n = listChunk(members.length - i, i, measured, bytes, bound);
      states.push(...(await Promise.all(members.slice(i, i + n).map((m) => store.load(m.id)))));
    }
    const s = states[i];
    if (s && s.tenant === tenant) {
      bytes += bound.sizeOf(s);
      measured++;
      if (bytes > bound.maxBytes && items.length > 0) return { items, next: last };
      items.push(s);
    }
    last = members[i]!.cursor;
  }
  return { items, next: more ? last : null };
}
