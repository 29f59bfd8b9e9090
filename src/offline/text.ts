/**
 * Reading the user's text for the offline model: places, time zones, arithmetic expressions and numbers.
 *
 * The text is unbounded and comes from clients, so nothing here runs a regular expression that can backtrack: each
 * function scans the text once (or a bounded number of times), and the only regular expressions left are a single
 * character class, a literal alternation, or anchored checks without nested or overlapping quantifiers. Time is
 * linear in the length of the text.
 */
import { isDotOrSpace, isSpaceAt, isSpaceCode, skipSpaces, trimEndWhere, trimWhere } from './scan.js';

function isDigitAt(text: string, i: number): boolean {
  const code = text.charCodeAt(i);
  return code >= 0x30 && code <= 0x39;
}

function isUpperAsciiAt(text: string, i: number): boolean {
  const code = text.charCodeAt(i);
  return code >= 0x41 && code <= 0x5a;
}

function isLowerAsciiAt(text: string, i: number): boolean {
  const code = text.charCodeAt(i);
  return code >= 0x61 && code <= 0x7a;
}

/** A character of `\w` as `\b` sees it (ASCII letters, digits, `_`). */
function isWordAt(text: string, i: number): boolean {
  return isUpperAsciiAt(text, i) || isLowerAsciiAt(text, i) || isDigitAt(text, i) || text[i] === '_';
}

const LETTER = /^\p{L}$/u;

/** The length (1 or 2 UTF-16 units) of the code point at `i` when it is a letter (`\p{L}`), else 0. */
function letterLengthAt(text: string, i: number): number {
  const code = text.codePointAt(i);
  if (code === undefined) return 0;
  const char = String.fromCodePoint(code);
  return LETTER.test(char) ? char.length : 0;
}

// ---- places -------------------------------------------------------------------------------------------------------

/** The end of `keyword` at `i` when a word starts there (`\b`) and white space follows it, else -1. */
function keywordEnd(text: string, i: number, keywords: readonly string[]): number {
  if (i > 0 && isWordAt(text, i - 1)) return -1;
  for (const keyword of keywords) {
    if (text.startsWith(keyword, i) && isSpaceAt(text, i + keyword.length)) return i + keyword.length;
  }
  return -1;
}

/** The end of a capitalised word at `i` (an ASCII capital, then letters, apostrophes and hyphens), else -1. */
function wordEnd(text: string, i: number): number {
  if (!isUpperAsciiAt(text, i)) return -1;
  let j = i + 1;
  for (;;) {
    const char = text[j];
    if (char === "'" || char === '’' || char === '-') j++;
    else {
      const length = letterLengthAt(text, j);
      if (!length) return j;
      j += length;
    }
  }
}

/** The end of a name at `i`: capitalised words separated by white space ("New York"), else -1. */
function nameEnd(text: string, i: number): number {
  let end = wordEnd(text, i);
  if (end < 0) return -1;
  for (;;) {
    const next = skipSpaces(text, end);
    if (next === end) return end;
    const after = wordEnd(text, next);
    if (after < 0) return end;
    end = after;
  }
}

/** After a name ending at `i`: the start of the next name of a list (", ", ", and ", " and ", " or ", " & "), or -1. */
function listSeparatorEnd(text: string, i: number): number {
  const k = skipSpaces(text, i);
  if (text[k] === ',') {
    const m = skipSpaces(text, k + 1);
    for (const word of ['and', 'or']) {
      if (text.startsWith(word, m) && isSpaceAt(text, m + word.length))
        return skipSpaces(text, m + word.length);
    }
    return m;
  }
  if (text[k] === '&') return skipSpaces(text, k + 1);
  if (k === i) return -1;
  for (const word of ['and', 'or']) {
    if (text.startsWith(word, k) && isSpaceAt(text, k + word.length))
      return skipSpaces(text, k + word.length);
  }
  return -1;
}

/**
 * The parts of a name split at a standalone "and" / "or" (between characters outside `\w`, as in "Land-and-Sea"),
 * each trimmed of white space and of trailing `.`, `'` and `’`.
 */
function nameParts(name: string): string[] {
  const parts: string[] = [];
  let start = 0;
  for (let i = 0; i < name.length; i++) {
    if (i > 0 && isWordAt(name, i - 1)) continue;
    for (const word of ['and', 'or']) {
      if (name.startsWith(word, i) && !isWordAt(name, i + word.length)) {
        parts.push(name.slice(start, i));
        start = i + word.length;
        i = start - 1;
        break;
      }
    }
  }
  parts.push(name.slice(start));
  const isTrailing = (code: number) => code === 0x2e || code === 0x27 || code === 0x2019;
  return parts.map((part) => trimEndWhere(trimWhere(part, isSpaceCode), isTrailing));
}

const NOT_PLACES = new Set(['the', 'a', 'an', 'my', 'your', 'our', 'this', 'that', 'it', 'general', 'total']);

/**
 * Capitalised place names after "in", "for" or "at": "in Paris and Tokyo" gives Paris and Tokyo. Without any, a
 * lowercase word after "in" or "for" ("in london" gives London).
 */
export function extractPlaces(text: string): string[] {
  const places = new Set<string>();
  const add = (place: string) => {
    if (place) places.add(place);
  };
  let i = 0;
  while (i < text.length) {
    const after = keywordEnd(text, i, ['in', 'for', 'at']);
    const start = after < 0 ? -1 : skipSpaces(text, after);
    let end = start < 0 ? -1 : nameEnd(text, start);
    if (end < 0) {
      i++;
      continue;
    }
    const names: Array<[number, number]> = [[start, end]];
    for (;;) {
      const next = listSeparatorEnd(text, end);
      const nextEnd = next < 0 ? -1 : nameEnd(text, next);
      if (nextEnd < 0) break;
      names.push([next, nextEnd]);
      end = nextEnd;
    }
    for (const [from, to] of names) for (const part of nameParts(text.slice(from, to))) add(part);
    i = end;
  }
  if (places.size) return [...places];

  i = 0;
  while (i < text.length) {
    const after = keywordEnd(text, i, ['in', 'for']);
    const start = after < 0 ? -1 : skipSpaces(text, after);
    if (start < 0 || !isLowerAsciiAt(text, start)) {
      i++;
      continue;
    }
    let end = start + 1;
    for (;;) {
      if (text[end] === '-') end++;
      else {
        const length = letterLengthAt(text, end);
        if (!length) break;
        end += length;
      }
    }
    if (end === start + 1) {
      i++;
      continue;
    }
    const word = text.slice(start, end);
    if (!NOT_PLACES.has(word)) add(word[0]!.toUpperCase() + word.slice(1));
    i = end;
  }
  return [...places];
}

// ---- time zones ---------------------------------------------------------------------------------------------------

const AREA_PART = /^[A-Z][A-Za-z]+$/;
const LOCATION = /^[A-Z][A-Za-z_]+$/;
const isArea = (segment: string) => segment.split('_').every((part) => AREA_PART.test(part));

/** IANA zone names in the text, in order of first appearance: "Europe/Paris", "America/Argentina/Buenos_Aires". */
export function extractZoneNames(text: string): string[] {
  const zones = new Set<string>();
  // Runs of `\w` and `/`: a zone name starts at a run's start or after a `/` of it, and ends at a `/` or its end.
  for (const run of text.match(/[A-Za-z0-9_/]+/g) ?? []) {
    const segments = run.split('/');
    for (let s = 0; s + 1 < segments.length; s++) {
      if (!isArea(segments[s]!) || !LOCATION.test(segments[s + 1]!)) continue;
      const third = segments[s + 2];
      const long = third !== undefined && LOCATION.test(third);
      zones.add(segments.slice(s, s + (long ? 3 : 2)).join('/'));
      s += long ? 2 : 1;
    }
  }
  return [...zones];
}

// ---- numbers and expressions --------------------------------------------------------------------------------------

/** The numbers in the text (`12`, `1.5`, and with `signed` `-3`), in order. */
export function extractNumbers(text: string, signed: boolean): number[] {
  const numbers: number[] = [];
  let i = 0;
  while (i < text.length) {
    const start = i;
    if (signed && text[i] === '-' && isDigitAt(text, i + 1)) i++;
    else if (!isDigitAt(text, i)) {
      i++;
      continue;
    }
    while (isDigitAt(text, i)) i++;
    if (text[i] === '.' && isDigitAt(text, i + 1)) {
      i++;
      while (isDigitAt(text, i)) i++;
    }
    numbers.push(Number(text.slice(start, i)));
  }
  return numbers;
}

/** The longest arithmetic expression in the text with at least two numbers: "2*(3+4)". */
export function extractExpression(text: string): string | undefined {
  let best: string | undefined;
  // One character class, so each run is found in one pass.
  for (const match of text.matchAll(/[\d.\s+\-*/^%()×÷]+/g)) {
    const candidate = trimWhere(match[0], isDotOrSpace).replaceAll('×', '*').replaceAll('÷', '/');
    if (extractNumbers(candidate, false).length < 2) continue;
    // An operator between two operands, white space aside.
    const compact = candidate.replace(/\s+/g, '');
    if (!/\d[-+*/^%][\d(]|\)[-+*/^%]/.test(compact)) continue;
    if (!best || candidate.length > best.length) best = candidate;
  }
  return best;
}
