/**
 * At most 4 prompt-cache breakpoints in what the model sees (the API's limit), a message thread's stored history
 * included: on a thread every marker sent stays server-side, so `cache_tool_results` (a marker on each new results
 * turn) would pile up one per turn. Before a turn, the run's copy of the history drops the markers of its oldest
 * messages until the request fits; the runner then sees a rewritten history and starts a new thread with it.
 */
import { badRequest } from '../errors.js';
import { blocksOf, type StoredBlock, type StoredMessage } from '../history.js';

const MAX_CACHE_BREAKPOINTS = 4;

/**
 * Where a block nests the blocks the API counts markers in: a tool result's or a search result's `content`, a
 * document's `source` (`{type: "content", content: [...]}`), a compaction's `tool_changes` and a tool change's `tool`
 * or `definition`, a tool search result's `tool_references`. cacheMarks counts and unmarked drops along exactly
 * these, so what is counted can always be dropped.
 */
const NESTED = ['content', 'source', 'tool_changes', 'tool', 'definition', 'tool_references'] as const;

/** The `cache_control` markers in `value` (a message, a block, a list of them, `system`, `tools`), nested included. */
export function cacheMarks(value: unknown): number {
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + cacheMarks(v), 0);
  if (typeof value !== 'object' || value === null) return 0;
  const o = value as Record<string, unknown>;
  let n = o['cache_control'] != null ? 1 : 0;
  for (const key of NESTED) {
    const nested = o[key];
    if (typeof nested === 'object' && nested !== null) n += cacheMarks(nested);
  }
  return n;
}

/** The params' part of a request's markers: `system`, and the top-level `cache_control` of automatic caching. */
interface MarkedParams {
  system?: unknown;
  /** Automatic caching: the API puts a marker on the request's last cacheable block, one of the 4 it takes. */
  cache_control?: unknown;
}

/**
 * The breakpoints a request holds whatever its history: `system`'s markers, the tools' and the one top-level
 * `cache_control` places (counted whether or not that block carries a marker already: counting it once too often
 * drops one more history marker, counting it too seldom gets the request refused).
 */
export function fixedMarks(params: MarkedParams, tools: unknown): number {
  return cacheMarks(params.system) + cacheMarks(tools) + (params.cache_control != null ? 1 : 0);
}

/**
 * 400 `invalid_request` when `system`, `tools` and the top-level `cache_control` alone make more breakpoints than
 * the API takes: the history's markers are dropped to make room (capCacheMarks), these are the session's own and
 * stay, so every turn would be refused.
 */
export function assertFixedMarks(params: MarkedParams, tools: unknown): void {
  const n = fixedMarks(params, tools);
  if (n <= MAX_CACHE_BREAKPOINTS) return;
  throw badRequest(
    `\`system\`, \`tools\` and the top-level \`cache_control\` make ${n} \`cache_control\` breakpoints; a request takes at most ${MAX_CACHE_BREAKPOINTS}.`,
    { cache_control_breakpoints: n, max: MAX_CACHE_BREAKPOINTS },
  );
}

/** `value` without any marker cacheMarks counts (copies; `value` is left as it is). */
function withoutMarks(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutMarks);
  if (typeof value !== 'object' || value === null) return value;
  const { cache_control: _c, ...rest } = value as Record<string, unknown>;
  for (const key of NESTED) {
    const nested = rest[key];
    if (typeof nested === 'object' && nested !== null) rest[key] = withoutMarks(nested);
  }
  return rest;
}

const unmarked = (block: StoredBlock): StoredBlock => withoutMarks(block) as StoredBlock;

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
