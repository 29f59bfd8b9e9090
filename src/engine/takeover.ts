/**
 * A run taken over after its owner died may send again a turn whose events the dead owner had already written:
 * `turn.started`, its `stream.event`s, even its `turn.completed` and `tool.started`s (calls to idempotent tools are
 * committed with their results, so a crash while they run loses the reply; src/engine/turns.ts `commitReply`). The
 * history never got that reply, so the log says so before the turn is sent again: `turn.dropped {iteration, reason:
 * "takeover"}`, as for the other ways a turn is dropped, and a follower (the chat stream's `reset-step`) discards
 * the turn's parts. A turn whose stream was cut and that is sent again (`reason: "stream_cut"`) is marked alike.
 */
import { eventOf } from '../events/schemas.js';
import type { SessionStore } from '../store/store.js';

/** Events of the log's tail looked at: a turn's tool events follow its `turn.completed`, a few per call. */
const TAIL = 128;
/** Read a few at a time: the first page almost always decides, and a tool's event may be a large result. */
const PAGE = 16;

/** Event types that say where the log's turns stand, newest first: the first of them found decides. */
const STARTED = new Set(['turn.started', 'stream.event', 'turn.completed']);
const SETTLED = new Set(['iteration.persisted', 'turn.dropped']);

/**
 * Writes `turn.dropped` when the log's newest turn event is of iteration `next` (the one the session will send)
 * and nothing settled it since. One XREVRANGE, on a takeover only. Best effort: a log whose tail holds more than
 * TAIL events after the turn's last one is not marked.
 */
export async function markLostTurn(
  store: SessionStore,
  id: string,
  next: number,
  reason: 'takeover' | 'stream_cut',
): Promise<boolean> {
  let before: string | undefined;
  for (let seen = 0; seen < TAIL; seen += PAGE) {
    const page = await store.newestEvents(id, PAGE, before);
    for (const ev of page) {
      if (SETTLED.has(ev.type)) return false;
      if (!STARTED.has(ev.type)) continue;
      const iteration = iterationOf(ev.data);
      if (iteration !== next) return false;
      await store.appendEvents(id, [eventOf('turn.dropped', { iteration, reason })]);
      return true;
    }
    if (page.length < PAGE) return false;
    before = page.at(-1)!.id;
  }
  return false;
}

function iterationOf(data: string): number | null {
  try {
    const v: unknown = JSON.parse(data);
    return typeof v === 'object' && v !== null && 'iteration' in v && typeof v.iteration === 'number'
      ? v.iteration
      : null;
  } catch {
    return null;
  }
}
