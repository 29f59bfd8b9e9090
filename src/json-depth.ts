/**
 * Nesting depth of JSON text, measured before it is parsed: deeply nested values overflow the stack of every
 * recursive walk after the parse (JSON.stringify when storing or hashing, zod, the SDK), so they are refused at the
 * edge (REST bodies in app.ts's JSON parser, WebSocket frames in events/frames.ts).
 */

/** Most levels of `[`/`{` a client's JSON may nest (the whole document, so every free-form value inside it too). */
export const DEFAULT_JSON_MAX_DEPTH = 64;

/**
 * True when `text` nests arrays/objects deeper than `max` levels (jsonBoundsExceeded with no key bound).
 */
export function jsonTooDeep(text: string, max: number): boolean {
  return jsonBoundsExceeded(Buffer.from(text), max, Infinity) === 'depth';
}

/** The message of the 400 `invalid_request` for a value nested too deeply. */
export const tooDeepMessage = (max: number) => `JSON nested more than ${max} levels deep is refused.`;

/** Most keys one JSON object of a client's may have (every object of the document: loose ones included). */
export const DEFAULT_JSON_MAX_KEYS = 256;

/** True when an object of `text` has more than `maxKeys` keys (and it nests at most `maxDepth` levels). */
export function jsonTooWide(text: string, maxKeys: number, maxDepth = DEFAULT_JSON_MAX_DEPTH): boolean {
  return jsonBoundsExceeded(Buffer.from(text), maxDepth, maxKeys) === 'keys';
}

/**
 * The first bound the JSON text `bytes` (UTF-8) breaks, scanning from its start: `depth` when arrays/objects nest
 * deeper than `maxDepth`, `keys` when an object has more than `maxKeys` keys; null when neither (jsonScan's
 * `breach`).
 */
export function jsonBoundsExceeded(
  bytes: Uint8Array,
  maxDepth: number,
  maxKeys: number,
): 'depth' | 'keys' | null {
  return jsonScan(bytes, maxDepth, maxKeys).breach;
}

const PROTO = Buffer.from('__proto__');
const CONSTRUCTOR = Buffer.from('constructor');

/**
 * One pass over the JSON text `bytes` (UTF-8), O(length), no allocation but the per-level counts:
 *
 * - `breach`: the first bound it breaks, `depth` when arrays/objects nest deeper than `maxDepth`, `keys` when an
 *   object has more than `maxKeys` keys; the scan stops there, so a 979 kB object of 90,000 keys costs the scan of
 *   its first 257 keys (microseconds), not a parse (~150 ms of event loop) nor a scan of the whole text. A deep or
 *   wide value costs every later walk (JSON.stringify when storing or hashing, zod's loose objects copy each key at
 *   every write and read, the SDK's recursion), so both are refused before the parse: REST bodies in app.ts's JSON
 *   parser, WebSocket frames in events/frames.ts.
 * - `suspectKeys`: a key is `__proto__` or `constructor`, or has an escape (which may spell one): only then does
 *   the body need the prototype-poisoning check of Fastify's parser (secure-json-parse), whose two regular
 *   expressions run over the whole text (~4 ms of event loop for a 900 kB tool result, measured: issue 22's noisy
 *   neighbour); any other body is parsed by JSON.parse alone.
 *
 * The inside of a string is skipped with `indexOf` (memchr) to its next quote: a 900 kB string costs microseconds,
 * not a byte-by-byte loop (~6 ms). Bytes, not characters: every structural character of JSON is ASCII and no byte
 * of a multi-byte UTF-8 sequence is, so the scan of the bytes sees what the scan of the characters would. Brackets
 * and colons inside strings (with escapes) do not count. Malformed text is left to JSON.parse.
 */
export function jsonScan(
  bytes: Uint8Array,
  maxDepth: number,
  maxKeys: number,
): { breach: 'depth' | 'keys' | null; suspectKeys: boolean } {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  // counts[d] ≥ 0: an object at depth d with that many keys so far; -1: an array.
  const counts = new Int32Array(maxDepth + 2);
  let depth = 0;
  let suspectKeys = false;
  // The last string closed: its first byte after the opening quote, and its closing quote.
  let strStart = -1;
  let strEnd = -1;
  const n = buf.length;
  for (let i = 0; i < n; i++) {
    const c = buf[i]!;
    if (c === 0x22 /* " */) {
      // To the closing quote: byte by byte for a few bytes (escapes skipped), then `indexOf` to the next quote,
      // taken when the backslashes before it are even in number.
      let j = i + 1;
      for (;;) {
        const stop = Math.min(j + 32, n);
        while (j < stop) {
          const d = buf[j]!;
          if (d === 0x22) break;
          j += d === 0x5c /* \\ */ ? 2 : 1;
        }
        if (j < n && buf[j] === 0x22) break;
        if (j >= n) return { breach: null, suspectKeys };
        const q = buf.indexOf(0x22, j);
        if (q < 0) return { breach: null, suspectKeys };
        let bs = 0;
        while (q - 1 - bs >= j && buf[q - 1 - bs] === 0x5c) bs++;
        if (bs % 2 === 0) {
          j = q;
          break;
        }
        j = q + 1;
      }
      strStart = i + 1;
      strEnd = j;
      i = j;
    } else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > maxDepth) return { breach: 'depth', suspectKeys };
      counts[depth] = c === 0x7b ? 0 : -1;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
      if (depth > 0) depth--;
    } else if (c === 0x3a /* : */ && depth > 0 && counts[depth]! >= 0) {
      if (++counts[depth]! > maxKeys) return { breach: 'keys', suspectKeys };
      // The key is the string just closed.
      if (!suspectKeys && strEnd >= 0) {
        const len = strEnd - strStart;
        if (
          (len === PROTO.length && buf.compare(PROTO, 0, len, strStart, strEnd) === 0) ||
          (len === CONSTRUCTOR.length && buf.compare(CONSTRUCTOR, 0, len, strStart, strEnd) === 0)
        )
          suspectKeys = true;
        // An escape may spell one (`\u005f_proto__`): at most 6 bytes per character of the 11 of "constructor".
        else if (len <= 66)
          for (let k = strStart; k < strEnd && !suspectKeys; k++) suspectKeys = buf[k] === 0x5c;
      }
    }
  }
  return { breach: null, suspectKeys };
}

/** True when `bytes` is empty or JSON whitespace only (a body that says nothing: no body). */
export function isBlank(bytes: Uint8Array): boolean {
  for (const c of bytes) if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return false;
  return true;
}

/** The message of the 400 `invalid_request` for an object with too many keys. */
export const tooWideMessage = (max: number) => `A JSON object with more than ${max} keys is refused.`;

/**
 * The JSON pointer of the first key that could poison a prototype in a parsed value: `__proto__`, or `constructor`
 * holding an object with a `prototype` key (what secure-json-parse refuses); null when there is none. JSON.parse
 * makes `__proto__` an own data property (never the prototype), so the walk sees it; it is called only when the
 * scan found a suspect key (jsonScan's `suspectKeys`), and the value nests at most DEFAULT_JSON_MAX_DEPTH levels
 * (the scan refused deeper text first), so the recursion is bounded.
 */
export function forbiddenKeyPath(value: unknown, path = ''): string | null {
  if (typeof value !== 'object' || value === null) return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = forbiddenKeyPath(value[i], `${path}/${i}`);
      if (found !== null) return found;
    }
    return null;
  }
  for (const key of Object.keys(value)) {
    const child: unknown = (value as Record<string, unknown>)[key];
    const at = `${path}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    if (key === '__proto__') return at;
    if (
      key === 'constructor' &&
      typeof child === 'object' &&
      child !== null &&
      Object.hasOwn(child, 'prototype')
    )
      return `${at}/prototype`;
    const found = forbiddenKeyPath(child, at);
    if (found !== null) return found;
  }
  return null;
}

/** The 400 `invalid_request` details for a forbidden key at `path` (forbiddenKeyPath's): one issue, `forbidden_key`. */
export const forbiddenKeyDetails = (path: string) => [
  {
    path,
    code: 'forbidden_key',
    message: `The key "${path.slice(path.lastIndexOf('/') + 1)}" is refused (it could poison a prototype).`,
  },
];
