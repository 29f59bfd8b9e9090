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
 * deeper than `maxDepth`, `keys` when an object has more than `maxKeys` keys; null when neither. One pass, O(length),
 * no allocation but the per-level counts; it stops at the first breach, so a 979 kB object of 90,000 keys costs the
 * scan of its first 257 keys (microseconds), not a parse (~150 ms of event loop) nor a scan of the whole text. A
 * deep or wide value costs every later walk (JSON.stringify when storing or hashing, zod's loose objects copy each
 * key at every write and read, the SDK's recursion), so both are refused before the parse: REST bodies in app.ts's
 * JSON parser, WebSocket frames in events/frames.ts.
 *
 * Bytes, not characters: every structural character of JSON is ASCII and no byte of a multi-byte UTF-8 sequence is,
 * so the scan of the bytes sees what the scan of the characters would. Brackets and colons inside strings (with
 * escapes) do not count. Malformed text is left to JSON.parse.
 */
export function jsonBoundsExceeded(
  bytes: Uint8Array,
  maxDepth: number,
  maxKeys: number,
): 'depth' | 'keys' | null {
  // counts[d] ≥ 0: an object at depth d with that many keys so far; -1: an array.
  const counts = new Int32Array(maxDepth + 2);
  let depth = 0;
  let inString = false;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i]!;
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > maxDepth) return 'depth';
      counts[depth] = c === 0x7b ? 0 : -1;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
      if (depth > 0) depth--;
    } else if (c === 0x3a /* : */ && depth > 0 && counts[depth]! >= 0) {
      if (++counts[depth]! > maxKeys) return 'keys';
    }
  }
  return null;
}

/** True when `bytes` is empty or JSON whitespace only (a body that says nothing: no body). */
export function isBlank(bytes: Uint8Array): boolean {
  for (const c of bytes) if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return false;
  return true;
}

/** The message of the 400 `invalid_request` for an object with too many keys. */
export const tooWideMessage = (max: number) => `A JSON object with more than ${max} keys is refused.`;
