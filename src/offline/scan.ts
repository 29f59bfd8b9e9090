/**
 * Linear scanning helpers for unbounded text: white space as `\s` sees it, skipping and trimming by character class.
 * They replace regular expressions such as `/[.\s]+$/`, which backtrack quadratically on crafted input.
 */

/** Whether `code` is a character of JavaScript's `\s` (the Unicode white space and line terminators). */
export function isSpaceCode(code: number): boolean {
  if (code <= 0x20) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  if (code < 0xa0) return false;
  return (
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200a) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x3000 ||
    code === 0xfeff
  );
}

export function isSpaceAt(text: string, i: number): boolean {
  return i < text.length && isSpaceCode(text.charCodeAt(i));
}

/** The index of the first non-space character at or after `i`. */
export function skipSpaces(text: string, i: number): number {
  while (isSpaceAt(text, i)) i++;
  return i;
}

/** `text` without the trailing characters for which `drop` holds. */
export function trimEndWhere(text: string, drop: (code: number) => boolean): string {
  let end = text.length;
  while (end > 0 && drop(text.charCodeAt(end - 1))) end--;
  return text.slice(0, end);
}

/** `text` without the leading and trailing characters for which `drop` holds. */
export function trimWhere(text: string, drop: (code: number) => boolean): string {
  let start = 0;
  while (start < text.length && drop(text.charCodeAt(start))) start++;
  return trimEndWhere(text.slice(start), drop);
}

/** `.` or white space: what ends a sentence. */
export const isDotOrSpace = (code: number): boolean => code === 0x2e || isSpaceCode(code);

/** Text split into chunks of `wordsPerChunk` words, each word with the white space around it. */
export function textChunks(text: string, wordsPerChunk = 3): string[] {
  if (!text) return [];
  const words: string[] = [];
  let i = 0;
  while (i < text.length) {
    const start = i;
    i = skipSpaces(text, i);
    if (i === text.length) break; // only white space: no word (a word takes the white space after it)
    while (i < text.length && !isSpaceCode(text.charCodeAt(i))) i++;
    i = skipSpaces(text, i);
    words.push(text.slice(start, i));
  }
  if (!words.length) return [text];
  const chunks: string[] = [];
  for (let w = 0; w < words.length; w += wordsPerChunk)
    chunks.push(words.slice(w, w + wordsPerChunk).join(''));
  return chunks;
}
