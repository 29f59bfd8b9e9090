/**
 * Strings of a client's JSON that are not well-formed Unicode: a `\uD800`–`\uDFFF` escape without its pair (a lone
 * surrogate). JSON.parse takes them, but they cannot be stored as they are: Redis keeps UTF-8, in which Node writes
 * U+FFFD for them (the value read back differs from the one answered), and the Lua scripts' JSON decoder refuses the
 * escape (an error where a 400 belongs). So they are refused at the edge (REST bodies in app.ts's JSON parser,
 * WebSocket frames in events/frames.ts), like depth and width (json-depth.ts).
 *
 * Only JSON text with such an escape can hold one (raw UTF-8 cannot encode a surrogate), so the text is searched for
 * `\u` (memchr-speed, no regular expression) and the parsed value is walked only when a surrogate escape is there.
 */

const ESCAPE = Buffer.from('\\u');

/** True when the JSON text `bytes` has an escape `\uD8`…`\uDF` (maybe inside an escaped backslash: then a walk). */
function surrogateEscape(bytes: Buffer): boolean {
  for (let i = bytes.indexOf(ESCAPE); i >= 0; i = bytes.indexOf(ESCAPE, i + 2)) {
    const d = bytes[i + 2];
    const x = bytes[i + 3];
    if ((d === 0x64 || d === 0x44) /* d D */ && x !== undefined) {
      // 8 9 a-f A-F
      if ((x >= 0x38 && x <= 0x39) || (x >= 0x61 && x <= 0x66) || (x >= 0x41 && x <= 0x46)) return true;
    }
  }
  return false;
}

/**
 * The JSON pointer of the first string of `value` (a key or a value, at any depth) that is not well-formed, or null.
 * Its depth is bounded by the parse that made `value` (json-depth.ts): the recursion is too.
 */
function illFormedAt(value: unknown, at: string): string | null {
  if (typeof value === 'string') return value.isWellFormed() ? null : at || '/';
  if (typeof value !== 'object' || value === null) return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = illFormedAt(value[i], `${at}/${i}`);
      if (found !== null) return found;
    }
    return null;
  }
  for (const [k, v] of Object.entries(value)) {
    // A key that is ill-formed is named as it can be: with U+FFFD for its lone surrogates.
    const path = `${at}/${k.toWellFormed().replaceAll('~', '~0').replaceAll('/', '~1')}`;
    if (!k.isWellFormed()) return path;
    const found = illFormedAt(v, path);
    if (found !== null) return found;
  }
  return null;
}

/** The JSON pointer of a lone surrogate in `value`, parsed from the JSON text `bytes`; null when it holds none. */
export function loneSurrogatePath(bytes: Buffer, value: unknown): string | null {
  return surrogateEscape(bytes) ? illFormedAt(value, '') : null;
}

/** `value`, parsed from the JSON text `bytes`, holds a lone surrogate. */
export function hasLoneSurrogate(bytes: Buffer, value: unknown): boolean {
  return loneSurrogatePath(bytes, value) !== null;
}

/** The message of the 400 `invalid_request` for such a string. */
export const loneSurrogateMessage =
  'A string holds a lone surrogate (an escape \\uD800-\\uDFFF without its pair): send well-formed Unicode.';

/** The `details` of that 400: where the string is. */
export const loneSurrogateDetails = (path: string) => [
  { path, code: 'ill_formed_unicode', message: 'a lone surrogate (\\uD800-\\uDFFF without its pair)' },
];
