import { eventLogKeys } from './keys.js';
import { defineLuaCommands, type RedisClient } from './lua-commands.js';
import { parseStreamEntry, type StoredEvent } from './store.js';

/** The cursor meaning "from the start of the log" (src/events/cursor.ts START). */
const START = '0-0';
const MAX_U64 = (1n << 64n) - 1n;

/**
 * The first id that can follow `after` (a canonical `<ms>-<seq>` cursor): `<ms>-<seq+1>`, or `<ms+1>-0` when the
 * sequence is at its maximum; null when `after` is the largest id a stream can hold (nothing can follow it).
 */
export function nextId(after: string): string | null {
  const dash = after.indexOf('-');
  const ms = BigInt(after.slice(0, dash));
  const seq = BigInt(after.slice(dash + 1));
  if (seq < MAX_U64) return `${ms}-${seq + 1n}`;
  if (ms < MAX_U64) return `${ms + 1n}-0`;
  return null;
}

export interface EventPage {
  /** Events after the cursor, in log order: at least one when any follows it, then within the byte budget. */
  events: StoredEvent[];
  /** The oldest event the log holds (null: the log is empty or gone). */
  firstId: string | null;
  /** The newest event the log holds (null: the log is empty or gone). */
  lastId: string | null;
  /**
   * The newest event trimmed from the log by its last trim, and the oldest it kept then (null: none recorded — never
   * trimmed, or trimmed before the record existed, or the session's meta is gone). Trusted while the oldest kept is
   * still `firstId` (src/events/cursor.ts `lostAfter`).
   */
  cutId: string | null;
  keptId: string | null;
  /** More events follow this page (its last event is not the newest of the log). */
  more: boolean;
}

export interface PageLimits {
  /** Most events in the page. */
  count: number;
  /** Byte budget of the page (sum of the events' stored fields); one larger event still comes alone. */
  maxBytes: number;
}

/**
 * Reads of the session event logs (the streams `s:{id}:e`), for the relay and the JSON pages. Each read is one
 * script (src/store/lua/read-events-2.lua): one round trip, atomic, so a page and the log's bounds are seen at one
 * instant. The writes of the log are the SessionStore's (apply, appendEvents, destroy).
 */
export class EventLog {
  constructor(private readonly redis: RedisClient) {
    // The store's scripts (the SessionStore's too: each is defined once per client).
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'sess');
  }

  /**
   * One page of `sessionId`'s log after `after` (exclusive, canonical; START reads from the start), with the log's
   * oldest and newest ids, read atomically. The page holds at most `limits.count` events and, past its first
   * event, at most `limits.maxBytes` bytes of stored fields: a reader holds one bounded page, whatever the size
   * of the events. A cursor at or past the newest event gives an empty page (and never an error, even for the
   * largest id a stream can hold).
   */
  async page(sessionId: string, after: string, limits: PageLimits): Promise<EventPage> {
    const start = after === START ? '-' : (nextId(after) ?? '');
    const [meta, log] = eventLogKeys(sessionId);
    const [first, last, cut, ...entries] = await this.redis.sessReadEvents(
      log,
      meta,
      start,
      Math.max(1, limits.count),
      Math.max(1, limits.maxBytes),
    );
    const firstId = typeof first === 'string' ? first : null;
    const lastId = typeof last === 'string' ? last : null;
    // Lua tables of {id, {field, value, …}}, as XRANGE answers (the script only copies them).
    const events = entries.map(parseStreamEntry);
    const tail = events.at(-1);
    const [cutId = null, keptId = null] = typeof cut === 'string' ? cut.split(' ') : [];
    return { events, firstId, lastId, cutId, keptId, more: tail !== undefined && tail.id !== lastId };
  }

  /**
   * The newest event id of the log (null: empty or gone), read where a stream is opened with a cursor and where a
   * channel starts. One script (newest-id-2.lua): the id is the meta hash's record of it, checked, so the newest
   * entry (up to ~1 MB) is copied neither into Redis's Lua nor into the reply, as an XREVRANGE of one entry did.
   */
  async lastId(sessionId: string): Promise<string | null> {
    const [meta, log] = eventLogKeys(sessionId);
    return (await this.redis.sessNewestId(log, meta)) ?? null;
  }
}
