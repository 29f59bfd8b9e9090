/**
 * The denied tool calls of a session, for its chat history (src/chat/history.ts): a denial is answered in the history
 * by an `is_error` result (`Tool call denied: <reason>`, src/engine/tool-step.ts), which alone does not tell it from
 * a tool's error, so the UI part of a denied call would be `output-error` where the live stream showed
 * `output-denied`. What tells them apart: the step waiting now (its calls' `approval`), and for the steps before,
 * the iteration records' `denied` (written with each results turn). The records are read only when the history
 * holds a result worded as a denial, so a history without one costs no read.
 */
import { blocksOf, type StoredMessage } from '../history.js';
import type { PendingStep } from '../store/pending.js';
import type { SessionStore } from '../store/store.js';
import { resultText } from './event-shapes.js';

/** Denied calls: tool_use id → the decision's reason (undefined: none given). */
export type Denials = ReadonlyMap<string, string | undefined>;

/** The service's wording of a denial's result (src/engine/tool-step.ts). */
const worded = (content: unknown): boolean => resultText(content).startsWith('Tool call denied');

/** The calls the history answers with a result worded as a denial (a result replaced since is not one). */
function wordedDenials(history: StoredMessage[]): Set<string> {
  const out = new Set<string>();
  for (const m of history) {
    if (m.role !== 'user') continue;
    for (const b of blocksOf(m))
      if (b.type === 'tool_result' && b.is_error && b.tool_use_id && worded(b.content))
        out.add(b.tool_use_id);
  }
  return out;
}

/**
 * The newest iteration records read for their denials: a bounded read per page, whatever the session's age (every
 * record is kept, compacted turns' too); a denial in an older record shows as `output-error`.
 */
const RECORDS_READ = 256;

export async function denials(
  store: SessionStore,
  id: string,
  history: StoredMessage[],
  pending: PendingStep | null,
): Promise<Denials> {
  const out = new Map<string, string | undefined>();
  const answered = wordedDenials(history);
  if (answered.size > 0)
    for (const r of await store.iterationRecords(id, -RECORDS_READ, -1))
      for (const d of r.denied ?? []) if (answered.has(d.id)) out.set(d.id, d.reason);
  for (const c of pending?.calls ?? [])
    if (c.approval === 'denied' && (c.result === undefined || worded(c.result.content)))
      out.set(c.id, c.reason);
  return out;
}
