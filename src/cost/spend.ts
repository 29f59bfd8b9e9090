/**
 * What each tenant spends per UTC day (§7.4): one hash per tenant per day, `q:{<tenant>}:usage:<YYYY-MM-DD>`, whose
 * fields are HINCRBY counters (tokens by kind, `cost` in micro-dollars, turns without a price) added once per
 * committed turn. The same hash is the `TENANT_MAX_COST_USD_PER_DAY` counter (checked before every model request, on
 * any replica) and the source of `GET /v1/usage`; it expires USAGE_RETENTION_DAYS after its day. The owner of the
 * keys: no other module touches them.
 */
import { InvalidRequest, QuotaExceeded } from '../errors.js';
import { KeyedBatch } from '../store/counter-batch.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import './lua/commands.js';
import { microsToUsd, usdToMicros, type PriceTable } from './prices.js';

/** `usage.cost_usd` ceilings refuse a run of a model without a price (400 `unknown_model_price`). */
const unknownModelPrice = (model: string, fallback: boolean, why: string) =>
  new InvalidRequest(
    'unknown_model_price',
    `The price of model "${model}"${fallback ? ' (in `params.fallbacks`)' : ''} is unknown, so ${why} cannot be kept; add it to MODEL_PRICES.`,
    { model },
  );

/** What a session's turns may run on: its `model`, and the models of `fallbacks` (the API's server-side fallback). */
export interface PricedParams {
  model: string;
  /** `params.fallbacks` as given: a list of `{model, …}`, or `"default"` (the API's own chain). */
  fallbacks?: unknown;
}

/**
 * The models named by `params.fallbacks`: a reply one of them served is priced as that model (prices.ts
 * `replyCost`). `"default"` names none: the API's own chain for a model is of Anthropic's models, and is not checked.
 */
function fallbackModels(params: PricedParams): string[] {
  if (!Array.isArray(params.fallbacks)) return [];
  const models: string[] = [];
  for (const f of params.fallbacks as unknown[]) {
    const model = typeof f === 'object' && f !== null ? (f as { model?: unknown }).model : undefined;
    if (typeof model === 'string') models.push(model);
  }
  return models;
}

/** The counters of one turn, as HINCRBY fields of both the session's hash and the tenant's day. */
export interface SpendIncr {
  in: number;
  out: number;
  cw: number;
  cr: number;
  /** Micro-dollars, 0 when unpriced. */
  cost: number;
  /** 1 when the turn's model has no price. */
  nc: number;
}

export const TENANT_BUDGET_EXHAUSTED = 'tenant_budget_exhausted';

/** `YYYY-MM-DD` of a time (UTC). */
export const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

const usageKey = (tenant: string, day: string) => `q:{${tenant}}:usage:${day}`;
/** HASH: session id → the seq of its last turn added to a day (record-2.lua), in the tenant's slot. */
const spentKey = (tenant: string) => `q:{${tenant}}:spent`;

/**
 * A turn's spend committed to its session and not known to be in its tenant's day yet: an entry of the session's meta
 * field `spend_open`, `<seq>|<day>|<in>,<out>,<cw>,<cr>,<cost>,<nc>`, written by the commit that billed it (apply-8.lua,
 * `seq` the commit's revision). The field is a list of them, oldest first, joined by `;`: every seq committed stays in
 * it until a record through it succeeded (the run's next billed commit keeps the entries above the seq its run
 * recorded through, `spend_recorded`; the run's end drops those at or below it, release-2.lua). A record that failed
 * without a crash (a Redis error on the tenant's slot) leaves its turn there, for the run's next record or the next
 * claim: whoever finds the field (the claim of the session's next run, the runs' sweep) records it again, and
 * record-2.lua counts a seq of a session at most once.
 */
export interface OpenSpend {
  seq: number;
  day: string;
  incr: SpendIncr;
}

/**
 * Most entries `spend_open` keeps (apply-8.lua `SPEND_OPEN_MAX`, the same number): beyond it the oldest is dropped.
 * A bound on a field written per commit, reached only after 32 consecutive billed turns of a session whose records
 * all failed (each record sends every entry its run has not recorded: one success empties the list).
 */
export const SPEND_OPEN_MAX = 32;

/** What a commit writes after its revision in a `spend_open` entry (apply-8.lua `spend_open`): `<day>|<counters>`. */
export const openSpendTail = (incr: SpendIncr, now: number): string =>
  `${utcDay(now)}|${incr.in},${incr.out},${incr.cw},${incr.cr},${incr.cost},${incr.nc}`;

/** The day an `openSpendTail` names (its first part). */
export const openSpendDay = (tail: string): string => tail.slice(0, tail.indexOf('|'));

/** One entry of `spend_open`, anchored at both ends (no backtracking across entries: the field is split first). */
const OPEN_ENTRY = /^(\d+)\|(\d{4}-\d\d-\d\d)\|(-?\d+),(-?\d+),(-?\d+),(-?\d+),(-?\d+),(-?\d+)$/;

/** The `spend_open` field decoded (see OpenSpend), in seq order; empty when absent. Malformed entries are skipped. */
export function parseOpenSpend(raw: string | undefined | null): OpenSpend[] {
  const out: OpenSpend[] = [];
  for (const entry of (raw ?? '').split(';')) {
    const m = OPEN_ENTRY.exec(entry);
    if (!m) continue;
    const n = (i: number) => Number(m[i]);
    out.push({
      seq: n(1),
      day: m[2]!,
      incr: { in: n(3), out: n(4), cw: n(5), cr: n(6), cost: n(7), nc: n(8) },
    });
  }
  return out.sort((a, b) => a.seq - b.seq);
}

/**
 * A record of open spend (`TenantSpend.recordOpen`) failed: the turns through `recorded` (null: none) are in their
 * day, the later ones are not (`cause`: the store's error).
 */
export class OpenSpendNotRecorded extends Error {
  constructor(
    readonly recorded: number | null,
    cause: unknown,
  ) {
    super('the open spend of a session was not all recorded', { cause });
    this.name = 'OpenSpendNotRecorded';
  }
}

/** Where a turn's record comes from: its session and seq (`OpenSpend`), so that it is counted once. */
export interface SpendMark {
  session: string;
  seq: number;
  day: string;
}

/** One turn of a record-2.lua call: session ('' unmarked), seq, then the counters. */
type TurnArgs = [string, number, number, number, number, number, number, number];

/**
 * A turn on its way to its day's hash (the batch's key, `usageKey`), with its tenant's `spentKey` named beside it:
 * a batch is one day's hash, so one tenant's, and every turn of it carries the same `spent`.
 */
interface PendingTurn {
  spent: string;
  args: TurnArgs;
}

/** A UTC day of a tenant's usage: a row of `GET /v1/usage` (TenantSpend `days`). */
export interface DayUsage {
  date: string;
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  cost_usd: number;
  /** Turns of models without a price (their tokens are counted, their cost is not). */
  unpriced_turns: number;
}

interface SpendOptions {
  prices: PriceTable;
  /** TENANT_MAX_COST_USD_PER_DAY; 0: no cap. */
  capUsdPerDay: number;
  /** Days a tenant's day of usage is kept (GET /v1/usage reaches back this far). */
  retentionDays: number;
  /**
   * Now (ms), whose UTC day a turn counts in and the cap is checked against: Redis's clock as the process reckons it
   * (the store's), so every replica counts a turn near midnight in the same day as the others.
   */
  now: () => number;
}

export class TenantSpend {
  readonly prices: PriceTable;
  private readonly capMicros: number;
  private readonly now: () => number;
  /** Turns' counters on their way to their tenant's day: the turns of one event-loop turn in one script call. */
  private readonly turns: KeyedBatch<PendingTurn>;
  private readonly retentionDays: number;

  constructor(
    private readonly redis: RedisClient,
    options: SpendOptions,
  ) {
    this.prices = options.prices;
    this.now = options.now;
    this.capMicros = usdToMicros(options.capUsdPerDay);
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'cost');
    this.retentionDays = options.retentionDays;
    const ttlS = options.retentionDays * 86_400;
    // A batch holds the turn that opened it: `turns[0]` is there.
    this.turns = new KeyedBatch((usage, turns) =>
      this.redis.costRecord(usage, turns[0]!.spent, ttlS, ...turns.flatMap((t) => t.args)),
    );
  }

  get capped(): boolean {
    return this.capMicros > 0;
  }

  /**
   * Adds a committed turn's counters to its tenant's day, with those of the other turns committed in the same
   * event-loop turn: one script call (lua/record-2.lua) per day's hash, where this was a MULTI of seven commands per
   * turn. `mark` (the turn's session and seq, and the day its commit counted it in): added only if that seq of the
   * session was not recorded yet. Unmarked (a turn whose session is gone): added, now's day.
   */
  record(tenant: string, incr: SpendIncr, mark?: SpendMark): Promise<void> {
    const day = mark?.day ?? utcDay(this.now());
    return this.turns.add(usageKey(tenant, day), {
      spent: spentKey(tenant),
      args: [mark?.session ?? '', mark?.seq ?? 0, incr.in, incr.out, incr.cw, incr.cr, incr.cost, incr.nc],
    });
  }

  /**
   * Records the spend a session's meta hash says is open (`spend_open`, OpenSpend), oldest first: the claim of its
   * next run, the runs' sweep finding its run ended without a record, a run's commit sending the turns it could not
   * record before its new one. Once: record-2.lua skips a seq recorded already (a record that landed though its
   * answer was lost, sent again, adds nothing). It refuses a seq below the session's last recorded one too, so the
   * turns go in seq order: those of one day in one script call (the batch keeps the order of the turns added in one
   * tick), the days one after the other, stopping at the first failure, which rejects with OpenSpendNotRecorded (the
   * seq recorded through). A day past USAGE_RETENTION_DAYS is not written again (its hash is gone, and so may be the
   * seq that counted it), and counts as recorded. Returns the highest seq recorded (null: `open` is empty).
   */
  async recordOpen(tenant: string, session: string, open: readonly OpenSpend[]): Promise<number | null> {
    const oldest = utcDay(this.now() - this.retentionDays * 86_400_000);
    const turns = [...open].sort((a, b) => a.seq - b.seq);
    let recorded: number | null = null;
    for (let i = 0; i < turns.length;) {
      const day = turns[i]!.day;
      const group: OpenSpend[] = [];
      while (i < turns.length && turns[i]!.day === day) group.push(turns[i++]!);
      if (day >= oldest) {
        // Added in this tick, in order: one batch of the day's hash, one record-2.lua call.
        const added = group.map((o) => this.record(tenant, o.incr, { session, seq: o.seq, day }));
        try {
          await Promise.all(added);
        } catch (err) {
          throw new OpenSpendNotRecorded(recorded, err);
        }
      }
      recorded = group[group.length - 1]!.seq;
    }
    return recorded;
  }

  /** A deleted session's recorded seq (record-2.lua) goes with it. One HDEL. */
  async forget(tenant: string, session: string): Promise<void> {
    await this.redis.hdel(spentKey(tenant), session);
  }

  /** Whether the tenant's spend today reached TENANT_MAX_COST_USD_PER_DAY (never without a cap). */
  /** `pendingMicros`: the cost of a turn not committed yet (so not in the day yet), counted as spent. */
  async overCap(tenant: string, pendingMicros = 0, now = this.now()): Promise<boolean> {
    if (!this.capped) return false;
    const spent = Number((await this.redis.hget(usageKey(tenant, utcDay(now)), 'cost')) ?? 0);
    return spent + pendingMicros >= this.capMicros;
  }

  /** 429 `quota_exceeded` (`details.quota: "cost_usd_per_day"`) for a run the tenant's cap does not allow. */
  async assertUnderCap(tenant: string | null): Promise<void> {
    if (tenant === null || !(await this.overCap(tenant))) return;
    const limit = microsToUsd(this.capMicros);
    throw new QuotaExceeded(
      'quota_exceeded',
      `The tenant has spent its ${limit} USD of today (UTC), the most TENANT_MAX_COST_USD_PER_DAY allows.`,
      { quota: 'cost_usd_per_day', limit },
    );
  }

  /**
   * The refusal (`unknown_model_price`) of a turn of `params` when a dollar ceiling (the session's budget, the tenant
   * cap) applies to it and its model, or a fallback model in `params.fallbacks` (which may serve the reply, and is
   * then what it costs), has no price; null when it may be sent. No Redis: the engine asks before every model
   * request.
   */
  unpriced(params: PricedParams, budgetUsd: number | undefined): InvalidRequest | null {
    if (budgetUsd === undefined && !this.capped) return null;
    const why = budgetUsd !== undefined ? 'a `budget.cost_usd`' : 'TENANT_MAX_COST_USD_PER_DAY';
    if (this.prices.price(params.model) === null) return unknownModelPrice(params.model, false, why);
    const fallback = fallbackModels(params).find((m) => this.prices.price(m) === null);
    return fallback === undefined ? null : unknownModelPrice(fallback, true, why);
  }

  /**
   * 400 `unknown_model_price` when a dollar ceiling (the session's budget, the tenant cap) applies to `params` (its
   * model, its fallback models).
   */
  assertPriced(params: PricedParams, budgetUsd: number | undefined): void {
    const refusal = this.unpriced(params, budgetUsd);
    if (refusal) throw refusal;
  }

  /** The tenant's usage per day from `from` to `to` (inclusive, `YYYY-MM-DD`), days without usage as zeros. */
  async days(tenant: string, from: string, to: string): Promise<DayUsage[]> {
    // Counted, not compared as text: past year 9999 `toISOString` answers `+010000-…`, which sorts before "9999-…".
    const start = Date.parse(`${from}T00:00:00Z`);
    const count = Math.round((Date.parse(`${to}T00:00:00Z`) - start) / 86_400_000) + 1;
    const dates: string[] = [];
    for (let i = 0; i < count; i++) dates.push(utcDay(start + i * 86_400_000));
    // Separate reads, not MULTI: reads need no transaction, and a Redis at maxmemory refuses MULTI (EXECABORT) but
    // still answers reads. Sent in the same tick, they go out as one auto-pipeline (one round trip); each is guarded by
    // the store boundary, so a Redis that is gone rejects with StoreUnavailable.
    const rows = await Promise.all(dates.map((d) => this.redis.hgetall(usageKey(tenant, d))));
    return dates.map((date, i) => {
      const h = rows[i] ?? {};
      const n = (f: string) => Number(h[f] ?? 0);
      return {
        date,
        input_tokens: n('in'),
        output_tokens: n('out'),
        cache_creation_input_tokens: n('cw'),
        cache_read_input_tokens: n('cr'),
        cost_usd: microsToUsd(n('cost')),
        unpriced_turns: n('nc'),
      };
    });
  }
}
