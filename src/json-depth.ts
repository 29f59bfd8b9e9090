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
