/**
 * Event ids are Redis stream ids, `<ms>-<seq>` (two unsigned 64-bit integers). They are the clients' cursors.
 * Ids compare numerically; canonical ids (no leading zeros, as Redis writes them) compare by length then text,
 * without BigInt on the hot path.
 */

import { z } from 'zod';

const MAX_U64 = (1n << 64n) - 1n;

/** The cursor meaning "from the start of the log". */
export const START = '0-0';

/**
 * A client's cursor in canonical form: `0`, `0-0`, empty or absent → `0-0`; `<ms>-<seq>` → itself without
 * leading zeros; anything else (a bare `<ms>`, negative, too large, garbage) → null.
 */
export function parseCursor(raw: string | undefined | null): string | null {
  if (raw === undefined || raw === null || raw === '' || raw === '0') return START;
  const m = /^(\d{1,20})-(\d{1,20})$/.exec(raw);
  if (!m) return null;
  const ms = BigInt(m[1]!);
  const seq = BigInt(m[2]!);
  if (ms > MAX_U64 || seq > MAX_U64) return null;
  return `${ms}-${seq}`;
}

export const isCursor = (raw: string) => parseCursor(raw) !== null;

/** A cursor in a query (`after`): refused with 400 unless `parseCursor` takes it (Redis errors on anything else). */
export const cursorParam = z
  .string()
  .max(64)
  .refine(isCursor, 'not an event id: give the `id` of an event (`<ms>-<seq>`), or 0 for the start');

function cmpNum(a: string, b: string): number {
  if (a.length !== b.length) return a.length < b.length ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Numeric comparison of two canonical stream ids: negative, 0, positive. */
export function compareIds(a: string, b: string): number {
  const da = a.indexOf('-');
  const db = b.indexOf('-');
  const ms = cmpNum(a.slice(0, da), b.slice(0, db));
  return ms !== 0 ? ms : cmpNum(a.slice(da + 1), b.slice(db + 1));
}

/** What a read of the log says of its bounds (src/store/events.ts EventPage). */
export interface LogBounds {
  /** The oldest and newest events it holds (null: an empty log). */
  firstId: string | null;
  lastId: string | null;
  /** The newest event its last trim dropped, and the oldest it kept (null: none recorded). */
  cutId: string | null;
  keptId: string | null;
}

/**
 * Whether events after `after` were trimmed: some trimmed event is newer than it. The record of the last trim says so
 * while the log still starts where that trim left it; otherwise (no record, a trim that did not record itself, a
 * log made again) any cursor older than the oldest event kept is taken as having lost some.
 */
export function lostAfter(after: string, log: LogBounds): boolean {
  if (after === START) return false;
  if (log.cutId !== null && log.keptId === log.firstId) return compareIds(log.cutId, after) > 0;
  return log.firstId !== null && compareIds(log.firstId, after) > 0;
}

/**
 * Where a client's cursor stands in a log (`lastId` null: an empty log):
 * - `ok`: the events after it are all retained (START always is);
 * - `expired`: events after it were trimmed (410 cursor_expired), `lostAfter`;
 * - `ahead`: past the newest event. The log's ids only grow and a client only learns ids from the log, so such a
 *   cursor was never given by this log (forged, from another session, or lost in a failover of Redis): the
 *   transports refuse it before they start (400 invalid_cursor, docs/API.md §6).
 */
export function placeCursor(after: string, log: LogBounds): 'ok' | 'expired' | 'ahead' {
  if (isAhead(after, log.lastId)) return 'ahead';
  return lostAfter(after, log) ? 'expired' : 'ok';
}

/** A cursor (not START) past the newest event `lastId` of its log (null: empty), `placeCursor`'s `ahead`. */
export const isAhead = (after: string, lastId: string | null): boolean =>
  after !== START && (lastId === null || compareIds(after, lastId) > 0);
