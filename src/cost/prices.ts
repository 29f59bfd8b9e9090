/**
 * The one price table (§7.4): list prices per model family, in US dollars — per million tokens for input, output,
 * cache writes (5 minutes, 1 hour) and cache reads, per request for billed server tools (web search: $10 per
 * 1,000). `MODEL_PRICES` (JSON, validated at boot by src/config.ts) overrides a family or adds one. A turn's cost is
 * counted in integer micro-dollars (one rounding per turn), so Redis counters add up without float drift; the API
 * shows dollars. Sonnet's long-context (> 200k input) rates and batch discounts are not modelled.
 */
import { z } from 'zod';

const dollars = z.number().min(0).max(1_000_000);

/** One family's prices; the cache rates default to the API's multipliers of `input` (1.25×, 2×, 0.1×). */
const modelPriceSchema = z.strictObject({
  input: dollars,
  output: dollars,
  cache_write_5m: dollars.optional(),
  cache_write_1h: dollars.optional(),
  cache_read: dollars.optional(),
  /** Dollars per request, by the name of the counter in `usage.server_tool_use` (`web_search_requests`, …). */
  server_tools: z.record(z.string().regex(/^[a-z_]{1,64}$/), dollars).optional(),
});
type ModelPriceInput = z.infer<typeof modelPriceSchema>;

/** A provider's prefix of a model id: `anthropic.`, Bedrock's inference profiles `us.anthropic.`, `us-gov.anthropic.`. */
const PROVIDER_PREFIX = /^(?:[a-z]{2,6}(?:-[a-z]{2,6})?\.)?anthropic\./;

/**
 * A model id as the price table reads it: lowercase, without a provider's prefix. Lookups and `MODEL_PRICES` keys
 * both go through it, so a key names what a lookup finds (`anthropic.claude-x` is `claude-x`, as the id is).
 */
export const modelKey = (model: string): string => model.toLowerCase().replace(PROVIDER_PREFIX, '');

/**
 * A `MODEL_PRICES` key: a family (`claude-sonnet-4-5`), a model id as a provider names it (`anthropic.claude-x`,
 * `us.anthropic.claude-x-v1:0`, `claude-x@20260101`) or a Bedrock ARN, whose id is all a request names
 * (`arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3d4e5f6`). One character class under a
 * bounded count: checked in linear time, whatever the input.
 */
const modelKeySchema = z
  .string()
  .regex(
    /^[A-Za-z0-9][\w.:/-]{0,255}$/,
    'a model id, family or ARN: a letter or digit, then up to 255 of letters, digits and . _ : / -',
  )
  .refine((k) => modelKey(k) !== '', 'a provider prefix alone names no model');

/**
 * `MODEL_PRICES`: `{"<family>": prices}`; a family is a model id without its date (`claude-sonnet-4-5`), or any id
 * a session names (priced as itself). Keys are read as lookups read ids (`modelKey`): two that read the same are
 * refused.
 */
export const modelPricesSchema = z.record(modelKeySchema, modelPriceSchema).superRefine((prices, ctx) => {
  const seen = new Map<string, string>();
  for (const key of Object.keys(prices)) {
    const other = seen.get(modelKey(key));
    if (other !== undefined)
      ctx.addIssue({ code: 'custom', path: [key], message: `names the same model as "${other}"` });
    seen.set(modelKey(key), key);
  }
});
export type ModelPrices = z.infer<typeof modelPricesSchema>;

interface ModelPrice {
  input: number;
  output: number;
  cache_write_5m: number;
  cache_write_1h: number;
  cache_read: number;
  server_tools: Record<string, number>;
}

/** Billed per request by default: web search ($10 / 1,000); web fetch costs only its tokens. */
const SERVER_TOOLS = { web_search_requests: 0.01, web_fetch_requests: 0 };

/**
 * List prices ($ per MTok), from Anthropic's pricing page. Cache rates not given follow from input. Haiku 5.5 is at
 * its rate for prompts up to 100k tokens (its long-prompt tier is not modelled).
 */
const LIST: Record<string, ModelPriceInput> = {
  'claude-fable-5-1': { input: 10, output: 50, cache_read: 0.25 },
  'claude-mythos-5-1': { input: 10, output: 50, cache_read: 0.25 },
  'claude-fable-5': { input: 10, output: 50 },
  'claude-mythos-5': { input: 10, output: 50 },
  'claude-opus-5-5': { input: 4, output: 20, cache_read: 0.2 },
  'claude-opus-5': { input: 5, output: 25 },
  'claude-opus-4-8': { input: 5, output: 25 },
  'claude-opus-4-7': { input: 5, output: 25 },
  'claude-opus-4-6': { input: 5, output: 25 },
  'claude-opus-4-5': { input: 5, output: 25 },
  'claude-opus-4-1': { input: 15, output: 75 },
  'claude-opus-4': { input: 15, output: 75 },
  'claude-opus-4-0': { input: 15, output: 75 },
  'claude-3-opus': { input: 15, output: 75 },
  'claude-sonnet-5-5': { input: 2, output: 10 },
  'claude-sonnet-5': { input: 2, output: 10 },
  'claude-sonnet-4-6': { input: 3, output: 15 },
  'claude-sonnet-4-5': { input: 3, output: 15 },
  'claude-sonnet-4': { input: 3, output: 15 },
  'claude-sonnet-4-0': { input: 3, output: 15 },
  'claude-3-7-sonnet': { input: 3, output: 15 },
  'claude-3-5-sonnet': { input: 3, output: 15 },
  'claude-haiku-5-5': { input: 0.1, output: 0.5, cache_read: 0.01 },
  'claude-haiku-4-5': { input: 1, output: 5 },
  'claude-3-5-haiku': { input: 0.8, output: 4 },
  'claude-3-haiku': { input: 0.25, output: 1.25, cache_write_5m: 0.3, cache_write_1h: 0.5, cache_read: 0.03 },
};

function complete(p: ModelPriceInput): ModelPrice {
  return {
    input: p.input,
    output: p.output,
    cache_write_5m: p.cache_write_5m ?? p.input * 1.25,
    cache_write_1h: p.cache_write_1h ?? p.input * 2,
    cache_read: p.cache_read ?? p.input * 0.1,
    server_tools: { ...SERVER_TOOLS, ...p.server_tools },
  };
}

/** Model families and their prices: the list prices, then `MODEL_PRICES` over them. */
export class PriceTable {
  private readonly families = new Map<string, ModelPrice>();
  /** Longest family first, so `claude-opus-4-1` wins over `claude-opus-4`. */
  private readonly order: string[];

  constructor(overrides: ModelPrices = {}) {
    for (const [family, p] of Object.entries(LIST)) this.families.set(family, complete(p));
    for (const [family, p] of Object.entries(overrides)) this.families.set(modelKey(family), complete(p));
    this.order = [...this.families.keys()].sort((a, b) => b.length - a.length);
  }

  /**
   * The family of a model id, or null: the id itself, or it followed by a date (`-20250929`, `@20250929`),
   * `-latest` or a provider's version (`-v1:0`; Vertex's `-v2@20241022`), with a provider's prefix (`anthropic.`,
   * Bedrock's inference profiles `us.anthropic.`, `global.anthropic.`, `us-gov.anthropic.`) ignored, and case too
   * (`modelKey`, as `MODEL_PRICES` keys are read). An id of a newer generation is not priced as an older one:
   * `claude-opus-4-7` is unknown, not `claude-opus-4`.
   */
  family(model: string): string | null {
    const id = modelKey(model);
    for (const f of this.order) {
      if (id === f) return f;
      if (!id.startsWith(f)) continue;
      if (/^(?:-v\d+)?(?:[-@]\d{8}|-latest)?(?:-v\d+(?::\d+)?)?$/.test(id.slice(f.length))) return f;
    }
    return null;
  }

  price(model: string): ModelPrice | null {
    const f = this.family(model);
    return f === null ? null : (this.families.get(f) ?? null);
  }

  /** A reply of `model`: its cost in micro-dollars, or null when the model has no price. */
  turnCost(model: string, u: ReplyUsage | null | undefined): number | null {
    const price = this.price(model);
    if (price === null) return null;
    return u ? Math.round(tokenMicros(tokensOf(u), price) + serverToolMicros(u, price)) : 0;
  }

  /**
   * A reply's cost in micro-dollars (rounded once), each part at the price of the model that served it; null when
   * one of them has no price. `u` is its usage as counted (with its compactions': `withCompactionUsage`).
   *
   * A reply a fallback model served (`params.fallbacks`: the API says so with a `fallback_message` entry in
   * `usage.iterations`) is priced by iteration: each `message` and `fallback_message` entry at the model it names,
   * else the reply's `model` (`served`: the fallback's), else `requested`; what the counted usage holds besides them
   * (a compaction's tokens, the server tool requests) at the reply's model. Any other reply is the requested model's,
   * priced as `requested` whole: the API served it with that model, and an operator's price for that very id (an
   * inference profile's ARN) is the one that applies, whatever id the reply's fields name.
   */
  replyCost(
    requested: string,
    served: string | null | undefined,
    u: (ReplyUsage & { iterations?: unknown }) | null | undefined,
  ): number | null {
    const entries = Array.isArray(u?.iterations) ? (u.iterations as unknown[]).filter(isIteration) : [];
    if (!u || !entries.some((e) => e.type === 'fallback_message')) return this.turnCost(requested, u);
    const replyModel = served || requested;
    // What the entries priced at their own model leave of the counted usage (none, when they add up to it).
    const left = tokensOf(u);
    let micros = 0;
    for (const e of entries) {
      if (e.type !== 'message' && e.type !== 'fallback_message') continue;
      const price = this.price(typeof e.model === 'string' && e.model ? e.model : replyModel);
      if (price === null) return null;
      const t = tokensOf(e);
      micros += tokenMicros(t, price);
      for (const k of TOKEN_KINDS) left[k] = Math.max(0, left[k] - t[k]);
    }
    const requests = Object.values(u.server_tool_use ?? {}).some((v) => count(v) > 0);
    if (requests || TOKEN_KINDS.some((k) => left[k] > 0)) {
      const price = this.price(replyModel);
      if (price === null) return null;
      micros += tokenMicros(left, price) + serverToolMicros(u, price);
    }
    return Math.round(micros);
  }
}

/** An entry of `usage.iterations` (the SDK's `BetaIterationsUsage`): its type, the model it names, its tokens. */
interface Iteration extends ReplyUsage {
  type?: unknown;
  model?: unknown;
}

const isIteration = (e: unknown): e is Iteration => typeof e === 'object' && e !== null;

/** A reply's usage as the API reports it (the SDK's `BetaUsage`, every field optional). */
interface ReplyUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation?: { ephemeral_5m_input_tokens?: number; ephemeral_1h_input_tokens?: number } | null;
  /** Requests by counter (`BetaServerToolUsage`); counters other than numbers are ignored. */
  server_tool_use?: object | null;
}

/** A usage's tokens by what they cost: cache writes split by `cache_creation` (the rest of them 5-minute writes). */
interface Tokens {
  input: number;
  output: number;
  write5m: number;
  write1h: number;
  read: number;
}
const TOKEN_KINDS = ['input', 'output', 'write5m', 'write1h', 'read'] as const;

const count = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);

function tokensOf(u: ReplyUsage): Tokens {
  const write = count(u.cache_creation_input_tokens);
  const write1h = Math.min(write, count(u.cache_creation?.ephemeral_1h_input_tokens));
  return {
    input: count(u.input_tokens),
    output: count(u.output_tokens),
    write5m: write - write1h,
    write1h,
    read: count(u.cache_read_input_tokens),
  };
}

/** What tokens cost at `price`, in micro-dollars ($ per MTok × tokens); not rounded: a reply is rounded once. */
const tokenMicros = (t: Tokens, price: ModelPrice): number =>
  t.input * price.input +
  t.output * price.output +
  t.write5m * price.cache_write_5m +
  t.write1h * price.cache_write_1h +
  t.read * price.cache_read;

/** What a reply's server tool requests cost at `price` ($ per request × 1e6 = micro-dollars). */
function serverToolMicros(u: ReplyUsage, price: ModelPrice): number {
  let sum = 0;
  for (const [name, n] of Object.entries(u.server_tool_use ?? {}))
    if (typeof n === 'number') sum += n * (price.server_tools[name] ?? 0) * 1e6;
  return sum;
}

/**
 * A reply's usage with its server-side compactions' added (`usage.iterations` entries of type `compaction`: the API
 * bills them, and leaves them out of the top-level fields). Every other entry is in the top-level fields already.
 * The same object when there is nothing to add.
 */
export function withCompactionUsage<U extends ReplyUsage & { iterations?: unknown }>(u: U): U {
  const entries = Array.isArray(u.iterations) ? (u.iterations as unknown[]) : [];
  const compactions = entries.filter(
    (e): e is ReplyUsage =>
      typeof e === 'object' && e !== null && (e as { type?: unknown }).type === 'compaction',
  );
  if (compactions.length === 0) return u;
  const n = (v: number | null | undefined) => (typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0);
  const sum = { ...u, cache_creation: { ...u.cache_creation } };
  for (const c of compactions) {
    sum.input_tokens = n(sum.input_tokens) + n(c.input_tokens);
    sum.output_tokens = n(sum.output_tokens) + n(c.output_tokens);
    sum.cache_creation_input_tokens = n(sum.cache_creation_input_tokens) + n(c.cache_creation_input_tokens);
    sum.cache_read_input_tokens = n(sum.cache_read_input_tokens) + n(c.cache_read_input_tokens);
    sum.cache_creation.ephemeral_5m_input_tokens =
      n(sum.cache_creation.ephemeral_5m_input_tokens) + n(c.cache_creation?.ephemeral_5m_input_tokens);
    sum.cache_creation.ephemeral_1h_input_tokens =
      n(sum.cache_creation.ephemeral_1h_input_tokens) + n(c.cache_creation?.ephemeral_1h_input_tokens);
  }
  return sum;
}

/** Micro-dollars as dollars (a number; at most 6 decimals). */
export const microsToUsd = (micros: number): number => Math.round(micros) / 1e6;

/** Dollars as micro-dollars (budgets and caps are compared in micro-dollars). */
export const usdToMicros = (usd: number): number => Math.round(usd * 1e6);
