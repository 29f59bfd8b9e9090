/**
 * The part of a session's whole record a chat page shows (GET /v1/chat/:id/messages) or names a run's message from
 * (GET /v1/chat/:id/stream): the live history and, when it starts with a compaction's summary, the newest messages of
 * the kept segments that summary stands for — the conversation as the user saw it, which a compaction moved out of
 * the history (spec §6.1: the segments keep every message, `?include=compacted`).
 *
 * Invariants:
 * - The whole record is the segments, oldest first, then the history; message i of the history is `base + i` of it
 *   (`msg_base`: every compaction moves its messages into a segment and adds their count). Segments are only ever
 *   appended. So the messages read from the segments, newest first, are numbered down from `base`, and a page's
 *   ids (`<session id>-<index>`, src/chat/history.ts) are the ones the history had when those messages were live.
 * - A segment is read only while the messages gathered start with a summary: the summary stands for the segment
 *   before it (the runner's compaction summarizes the whole history, itself starting with the previous summary). A
 *   history that starts with anything else (a fork's, whose source keeps the segments) is not the continuation of the
 *   segments, and they are not shown. Nor is a history given by `PUT …/messages`, even one that starts with a summary
 *   (another session's, say): the segments below the index it started at (`replaced_base`, kept by the PUT as
 *   `<replaced_at>:<index>`; for a PUT that kept none, or one whose `replaced_at` is not the meta's — a later PUT by
 *   an older version, which sets `replaced_at` alone — those of compactions recorded before the PUT, `at_iteration`
 *   ≤ `replaced_at`, told from the record kept with a segment's length, else by Redis, nothing of it sent) are never
 *   shown; those of compactions since are, back to that index.
 * - Bounded: segments are read newest first, one LINDEX each (one over 2 MiB, or kept in a key of its own, in pieces
 *   of at most 1 MiB: store.ts `segmentAt`), until the page has its MAX_USER_TURNS user turns, or
 *   SEGMENTS segments or SEGMENT_MESSAGES messages were read, or the next segment would take the bytes read past
 *   SEGMENT_BYTES: each segment is weighed before it is sent, by the byte length the meta hash keeps of it
 *   (`seg_bytes`, read with the history: store.ts historySnapshot) or, for one it keeps none of (kept by an older
 *   version), by Redis when the page is about to read it (segment-if-fits-1.lua: only its length comes back when it
 *   does not fit). So a segment larger than what is left of the bound is never sent, a GET holds at most
 *   SEGMENT_BYTES of segments however large one is, Redis copies at most one segment the page does not read, and
 *   nothing of the segments is touched when the history does not start with a summary. A GET costs at most SEGMENTS
 *   round trips more, however small the segments (a compaction after every turn), and one per MiB of a large one. When the read stops inside the conversation, the window's
 *   leading replies belong to an assistant message whose start was not read: it is named from its first message
 *   read, as the resumed stream names it from the same bounded read (a long run is shown, not left out).
 */
import type { StoredMessage } from '../history.js';
import { blocksOf } from '../history.js';
import type { SessionStore } from '../store/store.js';
import { isSummary } from '../engine/compaction.js';
import { SEGMENT_SIZES_KEPT } from '../store/apply-ops.js';
import { isUserBlock } from './event-shapes.js';

/** Most user turns a page shows: every user turn is a UIMessage of its own, and the page shows the newest 1000. */
export const MAX_UI_MESSAGES = 1000;
/** Most messages of the kept segments a page reads (the newest ones), whatever the number of segments. */
export const SEGMENT_MESSAGES = 4000;
/**
 * Most segments a page reads: each one is a round trip. The store keeps the byte lengths of as many, and the flag of
 * the one below them (`afterUser`).
 */
export const SEGMENTS = SEGMENT_SIZES_KEPT - 1;
/** Most bytes of segments a page reads: a segment that would take the read past it is not read. */
export const SEGMENT_BYTES = 8 * 1024 * 1024;

/** The messages a chat page is made of, numbered from `base` in the session's whole record. */
export interface ChatRecord {
  messages: StoredMessage[];
  base: number;
  /** How many of `messages` come before the live history (read from the segments). */
  older: number;
  /**
   * The messages start with a summary whose segment was not read and ends with a user turn (a compaction at a run's
   * start, whose segment is too large for the page or below the SEGMENTS it reads): toUIMessages names the answer
   * after it by the summary's index.
   */
  afterUser: boolean;
}

/**
 * Whether `m` is a user turn the chat shows as a message of its own: one with a block history.ts `userPart` shows
 * (event-shapes.ts `isUserBlock`: text, an image or a document the chat has a file part for).
 */
export const isUserTurn = (m: StoredMessage): boolean => m.role === 'user' && blocksOf(m).some(isUserBlock);

/**
 * The chat's window of the record of session `id`: its history and, for as long as the gathered messages start
 * with a summary, the newest messages of the segments before it, until `userTurns` user turns are gathered or the
 * bounds above are reached. `userTurns`: MAX_UI_MESSAGES for a page; 1 to know which message the newest replies
 * belong to (a run's, GET /v1/chat/:id/stream).
 */
export async function chatRecord(
  store: SessionStore,
  id: string,
  userTurns: number = MAX_UI_MESSAGES,
): Promise<ChatRecord> {
  const { history, base, segments, sizes, replaced } = await store.historySnapshot(id);
  let messages = history;
  let first = base;
  let turns = history.filter(isUserTurn).length;
  let readMessages = 0;
  let readBytes = 0;
  const last = Math.max(0, segments - SEGMENTS);
  const legacyPut = replaced.base === null && replaced.at >= 0;
  // The read ended at a segment a PUT replaced: the summary first is the PUT's history's, not that segment's.
  let replacedBelow = false;
  let i = segments - 1;
  for (; i >= last && isSummary(messages[0]); i--) {
    if (turns >= userTurns || readMessages >= SEGMENT_MESSAGES) break;
    // The segments below the history a `PUT …/messages` gave are the replaced history's, whatever it starts with.
    if (replaced.base !== null && first <= replaced.base) {
      replacedBelow = true;
      break;
    }
    // Weighed before it is read: a segment that would take the read past its bytes is not read, nor any older one.
    // Its length is the meta hash's, else (a segment kept before it held them) weighed by Redis as it is read: one
    // too large is not sent, and it ends the read, so no other unread segment is weighed.
    const left = SEGMENT_BYTES - readBytes;
    const known = sizes.get(i);
    // A PUT whose base is not known (made by an older version): the segments of compactions recorded before it are
    // the replaced history's, told by their record (kept with the length; else read by Redis, nothing sent).
    if (legacyPut && known && known.at_iteration <= replaced.at) {
      replacedBelow = true;
      break;
    }
    if (known && known.bytes > left) break;
    const read = known
      ? await store.segmentAt(id, i, known.bytes)
      : await store.segmentIfFits(id, i, left, legacyPut ? replaced.at : -1);
    if (read && 'replaced' in read) replacedBelow = true;
    if (!read?.segment || read.bytes > left) break;
    if (legacyPut && read.segment.at_iteration <= replaced.at) {
      replacedBelow = true;
      break;
    }
    readBytes += read.bytes;
    const taken = read.segment.messages.slice(-(SEGMENT_MESSAGES - readMessages));
    messages = [...taken, ...messages];
    first -= taken.length;
    readMessages += taken.length;
    turns += taken.filter(isUserTurn).length;
  }
  // Segment i, unread, ends right before the summary the messages start with: whether it ends with a user turn
  // (kept with its length) names the answer after that summary as the whole record would (history.ts toUIMessages).
  // Unless a PUT replaced it, however the read ended (a bound as well as the PUT's checks above): the summary is then
  // the PUT's history's, which stands for none of the segments.
  const unread = sizes.get(i);
  const replacedUnread =
    replacedBelow ||
    (replaced.base !== null && first <= replaced.base) ||
    (legacyPut && unread !== undefined && unread.at_iteration <= replaced.at);
  const afterUser = i >= 0 && !replacedUnread && isSummary(messages[0]) && unread?.endsWithUser === true;
  return { messages, base: first, older: messages.length - history.length, afterUser };
}
