/**
 * The offline model calling a tool it has no script for (a session's client tools, an MCP server's tools, any custom
 * tool): it picks the offered tool whose name and description share the most words with the user's text (the first
 * one on a tie or no match) and builds an input from its `input_schema`: every required property with a plausible
 * value of its type, taken from the text where it can be.
 *
 * Text and schemas come from clients, so the words are read by one linear scan, and the schema walk is bounded in
 * depth and in the number of properties it fills.
 */
import { extractNumbers, extractPlaces } from './text.js';
import { unchecked } from './unchecked.js';

/** A tool as offered in a request, read only as far as picking and filling it needs. */
export interface AnyTool {
  name: string;
  description?: unknown;
  input_schema?: unknown;
}

/** How deep nested objects and arrays of a schema are filled, and how many properties at most in all. */
const MAX_DEPTH = 4;
const MAX_PROPERTIES = 64;
/** The longest piece of the user's text put into a string property. */
const MAX_TEXT = 200;

const STOP_WORDS = new Set([
  'the',
  'and',
  'for',
  'with',
  'what',
  'whats',
  'this',
  'that',
  'from',
  'into',
  'please',
  'can',
  'you',
  'are',
  'was',
  'get',
  'set',
  'tool',
  'use',
  'how',
  'who',
  'why',
  'when',
  'where',
  'which',
  'about',
  'have',
  'has',
  'does',
  'will',
]);

/** Lower-case ASCII words of three characters or more (camelCase and snake_case split), minus stop words. */
export function wordsOf(text: string, limit = 10_000): Set<string> {
  const out = new Set<string>();
  let word = '';
  const flush = () => {
    if (word.length >= 3 && !STOP_WORDS.has(word)) out.add(word);
    word = '';
  };
  for (let i = 0; i < text.length && out.size < limit; i++) {
    const code = text.charCodeAt(i);
    const upper = code >= 0x41 && code <= 0x5a;
    const lower = code >= 0x61 && code <= 0x7a;
    const digit = code >= 0x30 && code <= 0x39;
    if (!upper && !lower && !digit) {
      flush();
      continue;
    }
    // A capital after a lower-case letter starts a word: `lookupOrder` reads as "lookup order".
    if (upper && word && i > 0) {
      const prev = text.charCodeAt(i - 1);
      if (prev >= 0x61 && prev <= 0x7a) flush();
    }
    word += upper ? String.fromCharCode(code + 0x20) : text[i];
    // A 64-character run is no word anyone asks about; the rest of it is skipped word by word.
    if (word.length > 64) word = '';
  }
  flush();
  return out;
}

/**
 * The offered tool that best matches `text` (most shared words), else the first one (none with `mustMatch`);
 * undefined when none.
 */
export function pickTool(text: string, tools: readonly AnyTool[], mustMatch = false): AnyTool | undefined {
  const said = wordsOf(text);
  let best: AnyTool | undefined;
  let bestScore = -1;
  for (const tool of tools) {
    const own = wordsOf(`${tool.name} ${typeof tool.description === 'string' ? tool.description : ''}`, 200);
    let score = 0;
    for (const word of own) if (said.has(word)) score++;
    if (score > bestScore) {
      best = tool;
      bestScore = score;
    }
  }
  return mustMatch && bestScore <= 0 ? undefined : best;
}

/** An input for `tool` from its schema: its required properties, each with a plausible value. */
export function inputFor(tool: AnyTool, text: string): Record<string, unknown> {
  return objectValue(tool.input_schema, new Said(text), 0, { left: MAX_PROPERTIES });
}

/** What the user's text offers as values, each read once (the text may be long) and only when asked for. */
class Said {
  #numbers: number[] | undefined;
  #places: string[] | undefined;
  #trimmed: string | undefined;
  /** Numbers handed out so far: `{a, b}` of "add 19 and 23" get 19 and 23, in the schema's order. */
  #numbersUsed = 0;
  constructor(private readonly text: string) {}
  get numbers(): number[] {
    return (this.#numbers ??= extractNumbers(this.text, true));
  }
  /** The next number of the text not handed out yet; the last one again once all were. */
  nextNumber(): number | undefined {
    const all = this.numbers;
    const n = all[Math.min(this.#numbersUsed, all.length - 1)];
    this.#numbersUsed++;
    return n;
  }
  get places(): string[] {
    return (this.#places ??= extractPlaces(this.text));
  }
  get trimmed(): string {
    return (this.#trimmed ??= this.text.trim().slice(0, MAX_TEXT));
  }
}

type Budget = { left: number };

function objectValue(schema: unknown, text: Said, depth: number, budget: Budget): Record<string, unknown> {
  const s = unchecked<'properties' | 'required'>(schema);
  const out: Record<string, unknown> = {};
  if (!s || depth > MAX_DEPTH) return out;
  const properties = unchecked<string>(s.properties) ?? {};
  const required = Array.isArray(s.required) ? s.required : [];
  for (const name of required) {
    if (typeof name !== 'string' || budget.left <= 0) continue;
    budget.left--;
    out[name] = valueFor(name, properties[name], text, depth + 1, budget);
  }
  return out;
}

function valueFor(name: string, schema: unknown, text: Said, depth: number, budget: Budget): unknown {
  const s = unchecked<
    | 'type'
    | 'enum'
    | 'const'
    | 'default'
    | 'examples'
    | 'anyOf'
    | 'oneOf'
    | 'items'
    | 'minItems'
    | 'minimum'
    | 'maximum'
    | 'format'
  >(schema);
  if (!s) return textValue(name, text);
  if ('const' in s) return s.const;
  if (s.default !== undefined) return s.default;
  if (Array.isArray(s.enum) && s.enum.length) return s.enum[0];
  if (Array.isArray(s.examples) && s.examples.length) return s.examples[0];
  const choice = Array.isArray(s.anyOf) ? s.anyOf[0] : Array.isArray(s.oneOf) ? s.oneOf[0] : undefined;
  if (choice !== undefined) return valueFor(name, choice, text, depth + 1, budget);
  const type = Array.isArray(s.type) ? s.type.find((t) => t !== 'null') : s.type;
  switch (type) {
    case 'integer':
    case 'number': {
      const found = text.nextNumber();
      let n = found === undefined ? 1 : type === 'integer' ? Math.round(found) : found;
      if (typeof s.minimum === 'number' && n < s.minimum) n = s.minimum;
      if (typeof s.maximum === 'number' && n > s.maximum) n = s.maximum;
      return n;
    }
    case 'boolean':
      return true;
    case 'array': {
      const count = typeof s.minItems === 'number' && s.minItems > 0 ? Math.min(s.minItems, 8) : 1;
      if (depth > MAX_DEPTH) return [];
      const items: unknown[] = [];
      for (let i = 0; i < count && budget.left > 0; i++) {
        budget.left--;
        items.push(valueFor(name, s.items, text, depth + 1, budget));
      }
      return items;
    }
    case 'object':
      return objectValue(schema, text, depth, budget);
    case 'null':
      return null;
    default:
      if (s.format === 'date-time') return new Date().toISOString();
      if (s.format === 'date') return new Date().toISOString().slice(0, 10);
      return textValue(name, text);
  }
}

/** A string for property `name`: a place for place-like names, an id-like token for ids, else the user's words. */
function textValue(name: string, text: Said): string {
  const key = name.toLowerCase();
  if (key === 'location' || key === 'city' || key === 'place' || key === 'country') {
    const place = text.places[0];
    if (place) return place;
  }
  if (key === 'id' || key.endsWith('_id') || name.endsWith('Id')) {
    const n = text.numbers.find((x) => Number.isInteger(x) && x >= 0);
    if (n !== undefined) return String(n);
  }
  return text.trimmed || 'example';
}
