import type { StoredEvent } from '../store/store.js';

/**
 * The pub/sub notice a session's events channel carries after each write to its log (written by the notice
 * fragment, src/store/lua/includes/notice.lua): either the id of the newest event (or empty), or the events themselves with
 * the id of the entry before them, so a relay that has fanned out exactly up to `prev` can fan them out without
 * reading the log. The log stays the source of truth: a relay at any other cursor reads it.
 */
export type Notice =
  | { kind: 'newest'; newest: string }
  | { kind: 'events'; prev: string; newest: string; events: StoredEvent[] };

/** Fields per event in an `E` notice: id, type, at, revision, data. */
const FIELDS = 5;

export function parseNotice(message: string): Notice {
  if (!message.startsWith('E\n')) return { kind: 'newest', newest: message };
  // JSON text holds no raw line break, and the script sends the events only when none of them does.
  const lines = message.split('\n');
  const prev = lines[1] ?? '';
  const newest = lines[2] ?? '';
  const events: StoredEvent[] = [];
  for (let i = 3; i + FIELDS - 1 < lines.length; i += FIELDS) {
    events.push({
      id: lines[i]!,
      type: lines[i + 1]!,
      at: Number(lines[i + 2]),
      revision: Number(lines[i + 3]),
      data: lines[i + 4]!,
    });
  }
  // A malformed notice (never written by the scripts) degrades to "read the log".
  if (events.length === 0 || (lines.length - 3) % FIELDS !== 0 || events.at(-1)!.id !== newest) {
    return { kind: 'newest', newest };
  }
  return { kind: 'events', prev, newest, events };
}
