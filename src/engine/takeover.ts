/**
 * A run taken over after its owner died may send again a turn whose events the dead owner had already written:
 * `turn.started`, its `stream.event`s, even its `turn.completed` and `tool.started`s (calls to idempotent tools are
 * committed with their results, so a crash while they run loses the reply; src/engine/turns.ts `commitReply`). The
 * history never got that reply, so the log says so before the turn is sent again: `turn.dropped {iteration, reason:
 * "takeover"}`, as for the other ways a turn is dropped, and a follower (the chat stream's `reset-step`) discards
 * the turn's parts. A turn whose stream was cut and that is sent again (`reason: "stream_cut"`) is marked alike.
 *
 * A compaction is a record of its own that the dead owner may have started (`compaction.started`, live news before
 * its commit): the one taken over is started again, with the same record number `n`, so the abandoned one is
 * marked first with the contract's own event for a compaction that left the history as it was:
 * `compaction.skipped {iteration, n, reason: "takeover"}`.
 */
import { eventOf } from '../events/schemas.js';
import { recordCount, type SessionState } from '../store/session-state.js';
import type { SessionStore } from '../store/store.js';

/** Events of the log's tail looked at: a turn's tool events follow its `turn.completed`, a few per call. */
const TAIL = 128;
/** Read a few at a time: the first page almost always decides, and a tool's event may be a large result. */
const PAGE = 16;

/** Event types that say where the log's turns stand, newest first: the first of them found decides. */
const STARTED = new Set(['turn.started', 'stream.event', 'turn.completed']);
const SETTLED = new Set([
  'iteration.persisted',
  'turn.dropped',
  'compaction.completed',
  'compaction.skipped',
]);

/**
 * Writes `turn.dropped` when the log's newest turn event is of the turn the session will send next (iteration + 1),
 * or `compaction.skipped` when it is the start of the compaction it will make next (record `n` = its records + 1),
 * and nothing settled it since. One XREVRANGE, on a takeover only. Best effort: a log whose tail holds more than
 * TAIL events after the turn's last one is not marked.
 */
export async function markLostTurn(
  store: SessionStore,
  id: string,
  state: Pick<SessionState, 'iteration' | 'compactions'>,
  reason: 'takeover' | 'stream_cut',
): Promise<boolean> {
  const next = state.iteration + 1;
  let before: string | undefined;
  for (let seen = 0; seen < TAIL; seen += PAGE) {
    const page = await store.newestEvents(id, PAGE, before);
    for (const ev of page) {
      if (SETTLED.has(ev.type)) return false;
      if (ev.type === 'compaction.started') {
        const n = recordCount(state) + 1;
        if (numberOf(ev.data, 'n') !== n) return false;
        const iteration = numberOf(ev.data, 'iteration') ?? state.iteration;
        await store.appendEvents(id, [eventOf('compaction.skipped', { iteration, n, reason })]);
        return true;
      }
      if (!STARTED.has(ev.type)) continue;
      const iteration = numberOf(ev.data, 'iteration');
      if (iteration !== next) return false;
      await store.appendEvents(id, [eventOf('turn.dropped', { iteration, reason })]);
      return true;
    }
    if (page.length < PAGE) return false;
    before = page.at(-1)!.id;
  }
  return false;
}

/** A number field of an event's data, or null. */
function numberOf(data: string, field: 'iteration' | 'n'): number | null {
  try {
    const v: unknown = JSON.parse(data);
    if (typeof v !== 'object' || v === null) return null;
    const x: unknown = Reflect.get(v, field);
    return typeof x === 'number' ? x : null;
  } catch {
    return null;
  }
}
