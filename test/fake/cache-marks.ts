/**
 * Prompt-cache breakpoints as the API counts them: every block with `cache_control` in what the model sees (the
 * tools, the system blocks and the whole conversation, a message thread's stored history included), and the one a
 * top-level `cache_control` (automatic caching) puts on the request's last cacheable block. More than 4 is a 400.
 */
import { invalid } from './validate.js';

/** The API's limit on `cache_control` blocks in one request. */
const MAX_CACHE_BREAKPOINTS = 4;

/** The `cache_control` markers in `value` (a message, a block, a list of them), nested blocks included. */
export function cacheMarks(value: unknown): number {
  if (Array.isArray(value)) return value.reduce((n: number, v) => n + cacheMarks(v), 0);
  if (typeof value !== 'object' || value === null) return 0;
  const o = value as Record<string, unknown>;
  let n = o['cache_control'] != null ? 1 : 0;
  for (const key of ['content', 'source', 'tool_changes', 'tool', 'definition', 'tool_references']) {
    const nested = o[key];
    if (typeof nested === 'object' && nested !== null) n += cacheMarks(nested);
  }
  return n;
}

/** Throws the API's 400 when the request holds more than 4 breakpoints. */
export function validateCacheMarks(
  conversation: readonly unknown[],
  system: unknown,
  tools: unknown,
  automatic: unknown,
): void {
  const found =
    cacheMarks(tools) + cacheMarks(system) + cacheMarks(conversation) + (automatic != null ? 1 : 0);
  if (found > MAX_CACHE_BREAKPOINTS) {
    throw invalid(
      `A maximum of ${MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found ${found}.`,
    );
  }
}
