/**
 * Nesting depth of JSON text, measured before it is parsed: deeply nested values overflow the stack of every
 * recursive walk after the parse (JSON.stringify when storing or hashing, zod, the SDK), so they are refused at the
 * edge (REST bodies in app.ts's JSON parser, WebSocket frames in events/frames.ts).
 */

/** Most levels of `[`/`{` a client's JSON may nest (the whole document, so every free-form value inside it too). */
export const DEFAULT_JSON_MAX_DEPTH = 64;

/**
 * True when `text` nests arrays/objects deeper than `max` levels. One pass over the characters, O(length), no
 * allocation; brackets inside strings (with escapes) do not count. Malformed text is left to JSON.parse.
 */
export function jsonTooDeep(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b /* [ */ || c === 0x7b /* { */) {
      if (++depth > max) return true;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) depth--;
  }
  return false;
}

/** The message of the 400 `invalid_request` for a value nested too deeply. */
export const tooDeepMessage = (max: number) => `JSON nested more than ${max} levels deep is refused.`;

/** Most keys one JSON object of a client's may have (every object of the document: loose ones included). */
export const DEFAULT_JSON_MAX_KEYS = 256;

/**
 * True when an object of `text` has more than `maxKeys` keys. One pass, O(length), before the parse (a wide object
 * costs every later walk: zod's loose objects copy each key, at every write and every read); the per-level counts
 * live in a stack as deep as the nesting allowed (`maxDepth`, checked by jsonTooDeep on the same text first).
 */
export function jsonTooWide(text: string, maxKeys: number, maxDepth = DEFAULT_JSON_MAX_DEPTH): boolean {
  // counts[d] ≥ 0: an object at depth d with that many keys so far; -1: an array.
  const counts = new Int32Array(maxDepth + 2);
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */) {
      if (depth > maxDepth) return false; // too deep: jsonTooDeep's answer
      counts[++depth] = 0;
    } else if (c === 0x5b /* [ */) {
      if (depth > maxDepth) return false;
      counts[++depth] = -1;
    } else if (c === 0x5d /* ] */ || c === 0x7d /* } */) {
      if (depth > 0) depth--;
    } else if (c === 0x3a /* : */ && depth > 0 && counts[depth]! >= 0) {
      if (++counts[depth]! > maxKeys) return true;
    }
  }
  return false;
}

/** The message of the 400 `invalid_request` for an object with too many keys. */
export const tooWideMessage = (max: number) => `A JSON object with more than ${max} keys is refused.`;
