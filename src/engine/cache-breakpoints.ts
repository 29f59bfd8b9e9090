/**
 * At most 4 prompt-cache breakpoints in what the model sees (the API's limit), a message thread's stored history
 * included: on a thread every marker sent stays server-side, so `cache_tool_results` (a marker on each new results
 * turn) would pile up one per turn. Before a turn, the run's copy of the history drops the markers of its oldest
 * messages until the request fits; the runner then sees a rewritten history and starts a new thread with it.
 */
import { blocksOf, type StoredBlock, type StoredMessage } from '../history.js';

const MAX_CACHE_BREAKPOINTS = 4;

/** The `cache_control` markers in `value` (a message, a block, a list of them, `system`, `tools`), nested included. */
export function cacheMarks(value: unknown): number {
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + cacheMarks(v), 0);
  if (typeof value !== 'object' || value === null) return 0;
  const o = value as Record<string, unknown>;
  let n = o['cache_control'] != null ? 1 : 0;
  for (const key of ['content', 'source', 'tool', 'definition']) {
    const nested = o[key];
    if (typeof nested === 'object' && nested !== null) n += cacheMarks(nested);
  }
  return n;
}

function unmarked(block: StoredBlock): StoredBlock {
  const { cache_control: _c, ...rest } = block;
  const content: unknown = rest.content;
  if (!Array.isArray(content)) return rest;
  return { ...rest, content: content.map((b: unknown) => (isBlock(b) ? unmarked(b) : b)) };
}

const isBlock = (b: unknown): b is StoredBlock => typeof b === 'object' && b !== null && 'type' in b;

/**
 * Drops the markers of the oldest messages of `history` (in place, each edited message a copy) until the history
 * and `fixed` (the request's `system` and `tools` marks) hold at most 4. Returns whether it changed anything.
 */
export function capCacheMarks(history: StoredMessage[], fixed: number): boolean {
  let total = fixed + cacheMarks(history);
  let changed = false;
  for (let i = 0; i < history.length && total > MAX_CACHE_BREAKPOINTS; i++) {
    const m = history[i]!;
    const marks = cacheMarks(m.content);
    if (marks === 0) continue;
    history[i] = { ...m, content: blocksOf(m).map(unmarked) };
    total -= marks;
    changed = true;
  }
  return changed;
}
