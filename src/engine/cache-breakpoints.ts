/**
 * At most 4 prompt-cache breakpoints in what the model sees (the API's limit), a message thread's stored history
 * included: on a thread every marker sent stays server-side, so `cache_tool_results` (a marker on each new results
 * turn) would pile up one per turn. Before a turn, the run's copy of the history drops the markers of its oldest
 * messages until the request fits; the runner then sees a rewritten history and starts a new thread with it.
 */
import { badRequest } from '../errors.js';
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

/**
 * 400 `invalid_request` when `system` and `tools` alone carry more markers than the API takes: the history's markers
 * are dropped to make room (capCacheMarks), these are the session's own and stay, so every turn would be refused.
 */
export function assertFixedMarks(system: unknown, tools: unknown): void {
  const n = cacheMarks(system) + cacheMarks(tools);
  if (n <= MAX_CACHE_BREAKPOINTS) return;
  throw badRequest(
    `\`system\` and \`tools\` carry ${n} \`cache_control\` breakpoints; a request takes at most ${MAX_CACHE_BREAKPOINTS}.`,
    { cache_control_breakpoints: n, max: MAX_CACHE_BREAKPOINTS },
  );
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
