import { NotFound } from '../errors.js';
import type { SessionStore } from '../store/store.js';
import { START } from './cursor.js';

/**
 * The session check of a reader of the event log (a JSON page, an SSE or WebSocket stream): the session is `tenant`'s,
 * or 404 `session_not_found`. A reader resuming with a cursor (`after` not START) may also read the log of a session of
 * `tenant` deleted while the log is kept (60 s, docs/API.md §9.18): it gets the events after its cursor, ending with
 * `session.deleted`, as a reader connected at the delete did; otherwise a follower that reconnected just after the
 * delete (slow_reader, shutting_down, a dropped connection) would miss it. A fresh reader (no cursor), another
 * tenant, or a session never made stays 404. Only a session not found costs the second read: a live session's check
 * is the one HGETALL it always was.
 * Returns whether the session is a deleted one: a stream of it ends once caught up, even when its cursor is at or past
 * the `session.deleted` already (src/events/hub.ts `subscribe`), where no event would ever come to end it.
 */
export async function checkReadable(
  store: SessionStore,
  tenant: string,
  id: string,
  after: string,
): Promise<{ deleted: boolean }> {
  try {
    await store.loadFor(tenant, id);
    return { deleted: false };
  } catch (err) {
    if (!(err instanceof NotFound) || after === START || !(await store.deletedFor(tenant, id))) throw err;
    return { deleted: true };
  }
}
