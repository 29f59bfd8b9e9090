/**
 * Memory paths. The tool speaks of `/memories/<path>`, the routes of `/v1/memory/<path>`; both become the same
 * canonical relative path (`notes.md`, `projects/a.md`, `''` for the root). Nothing outside the tenant's files can be
 * named: segments are letters, digits, `.`, `_`, `-` and spaces, never `.` or `..`, never empty; no backslash, `%`,
 * NUL or control character anywhere; bounded length and depth. Checked in one pass per segment, no backtracking.
 */

export const MEMORY_ROOT = '/memories';
/** Characters (UTF-16 code units, as `length` counts) of a canonical path. */
export const MAX_PATH = 512;
const MAX_SEGMENT = 128;
export const MAX_DEPTH = 16;
const SEGMENT = /^[\p{L}\p{N}._ -]+$/u;

export class MemoryPathError extends Error {}

/** The canonical relative path of `rel` (no leading `/`; a trailing `/` names a directory), or throws. */
export function canonicalPath(rel: string): string {
  if (rel.length > MAX_PATH) throw new MemoryPathError(`a memory path has at most ${MAX_PATH} characters`);
  const trimmed = rel.endsWith('/') ? rel.slice(0, -1) : rel;
  if (trimmed === '') return '';
  if (trimmed.startsWith('/')) throw new MemoryPathError('the path must be relative to the memory directory');
  const segments = trimmed.split('/');
  if (segments.length > MAX_DEPTH)
    throw new MemoryPathError(`a memory path is at most ${MAX_DEPTH} levels deep`);
  for (const s of segments) {
    if (s === '' || s === '.' || s === '..')
      throw new MemoryPathError('empty, "." and ".." path segments are not allowed');
    if (s.length > MAX_SEGMENT || !SEGMENT.test(s) || s.trim() !== s)
      throw new MemoryPathError(
        'path segments are letters, digits, ".", "_", "-" and inner spaces (no "\\", "%", NUL or control characters)',
      );
  }
  return segments.join('/');
}

/** The canonical path of a tool path (`/memories` or `/memories/…`), or throws. */
export function toolPath(path: unknown): string {
  if (typeof path !== 'string') throw new MemoryPathError('the path must be a string');
  if (path === MEMORY_ROOT || path === `${MEMORY_ROOT}/`) return '';
  if (!path.startsWith(`${MEMORY_ROOT}/`))
    throw new MemoryPathError(
      `memory paths start with ${MEMORY_ROOT}/ (got ${JSON.stringify(path.slice(0, 80))})`,
    );
  return canonicalPath(path.slice(MEMORY_ROOT.length + 1));
}

/** How the tool shows a canonical path. */
export const shownPath = (rel: string): string => (rel === '' ? MEMORY_ROOT : `${MEMORY_ROOT}/${rel}`);
