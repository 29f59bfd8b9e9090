import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * The service's Prometheus metrics, one registry per service instance (so several instances in one process, as the
 * tests run them, keep their own figures). Conventions: base units (seconds, bytes), counters end in `_total`, every
 * label has a closed set of values — never a session id, a tenant or a client-chosen name. The hot paths touch only
 * pre-made objects: one `observe`/`inc` per turn, tool call, commit or fanned-out batch, never per event or client.
 */

/** Outcomes of a settled webhook delivery attempt (`trs_webhook_deliveries_total{outcome}`; settle-7.lua's). */
export type WebhookOutcome = 'delivered' | 'retrying' | 'gave_up' | 'disabled' | 'stale' | 'gone';
/** Redis client errors, by what went wrong (`kind` label). */
export type RedisErrorKind =
  'connection_refused' | 'connection_reset' | 'timeout' | 'command_timeout' | 'dns' | 'cluster' | 'other';

/** The stop reasons the Messages API sends; anything else (a newer API) is counted as `other`. */
const STOP_REASONS = new Set([
  'end_turn',
  'tool_use',
  'max_tokens',
  'stop_sequence',
  'pause_turn',
  'refusal',
  'model_context_window_exceeded',
]);

/** Seconds. A model turn: first event within tens of ms (fake) to seconds (Claude), whole turns up to minutes. */
const UPSTREAM_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** Seconds. Redis round trips (commits, relay lag): sub-millisecond when idle, the command timeout (3 s) at worst. */
const REDIS_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3, 10];
/** Seconds. Server tools: from pure functions (µs) to network calls. */
const TOOL_BUCKETS = [0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30];

export interface MetricsOptions {
  /** Node's process and event-loop metrics (prom-client's defaults). Default true. */
  defaultMetrics?: boolean;
  /** METRICS_TENANT_LABEL: the token and cost series also carry a `tenant` label. Default false. */
  tenantLabel?: boolean;
}

/** A turn's tokens by kind and its cost, as the spend metrics count them. */
interface TurnSpend {
  input: number;
  output: number;
  cache_write: number;
  cache_read: number;
  /** Micro-dollars; null without a price (no cost counted). */
  costMicros: number | null;
}

/** What the gauges read when scraped (the engine's counts), so nothing is updated on the hot path for them. */
export interface RunCounts {
  readonly activeRuns: number;
  readonly waitingRuns: number;
}

export class Metrics {
  readonly registry = new Registry();
  private runs: RunCounts | null = null;

  // Runs and turns.
  readonly runsStarted: Counter;
  readonly runsFailed: Counter<'code'>;
  readonly turns: Counter<'stop_reason'>;
  readonly upstreamFirstEvent: Histogram;
  readonly upstreamDuration: Histogram;
  readonly turnDuration: Histogram;
  readonly toolDuration: Histogram<'tool' | 'outcome'>;
  readonly commitDuration: Histogram;
  readonly commitRetries: Counter;
  readonly leaseTakeovers: Counter;
  readonly activeRuns: Gauge;
  readonly waitingRuns: Gauge;
  // Events.
  readonly eventsRelayed: Counter;
  readonly liveEventsDropped: Counter<'reason'>;
  readonly relayLag: Histogram;
  readonly replayPages: Counter<'source'>;
  readonly streamsOpened: Counter<'transport'>;
  readonly streamConnections: Gauge<'transport'>;
  readonly slowReaderCloses: Counter<'transport'>;
  /** Bytes of answers handed to sockets and not yet flushed to the kernel (see plugins/write-guard.ts). */
  readonly responseBytesHeld: Gauge;
  // Dependencies and the API surface.
  readonly redisErrors: Counter<'kind'>;
  readonly upstreamRequests: Counter<'status_class' | 'error_type'>;
  readonly upstreamRetries: Counter;
  readonly upstreamStreamErrors: Counter<'error_type'>;
  readonly httpErrors: Counter<'route' | 'method' | 'status' | 'code'>;
  /** For the webhooks component: one increment per delivery attempt's outcome. */
  readonly webhookDeliveries: Counter<'outcome'>;
  // Tool tasks (tenant tools, spec §7.1).
  readonly toolTasks: Counter<'event'>;
  readonly toolTaskClaimLatency: Histogram;
  readonly toolWorkersActive: Gauge;
  // Spend (§7.4): by model family (a closed set: the price table's families, or `unknown`), tenant only if asked.
  readonly tokens: Counter<'model_family' | 'kind' | 'tenant'>;
  readonly costUsd: Counter<'model_family' | 'tenant'>;
  private readonly tenantLabel: boolean;

  constructor(opts: MetricsOptions = {}) {
    const registers = [this.registry];
    const runs = () => this.runs;
    this.runsStarted = new Counter({
      name: 'trs_runs_started_total',
      help: 'Runs this process took (a claim of a running session).',
      registers,
    });
    this.runsFailed = new Counter({
      name: 'trs_runs_failed_total',
      help: 'Runs that ended the session as failed, by error code.',
      labelNames: ['code'],
      registers,
    });
    this.turns = new Counter({
      name: 'trs_turns_total',
      help: 'Model turns answered, by stop reason.',
      labelNames: ['stop_reason'],
      registers,
    });
    this.upstreamFirstEvent = new Histogram({
      name: 'trs_upstream_first_event_seconds',
      help: 'Streamed turns: from the turn start to the first stream event from the Messages API.',
      buckets: UPSTREAM_BUCKETS,
      registers,
    });
    this.upstreamDuration = new Histogram({
      name: 'trs_upstream_duration_seconds',
      help: "A turn's model call: from the turn start to the whole reply (SDK retries included).",
      buckets: UPSTREAM_BUCKETS,
      registers,
    });
    this.turnDuration = new Histogram({
      name: 'trs_turn_duration_seconds',
      help: 'A whole iteration: model call, server tools and the commits, until the next turn can start.',
      buckets: UPSTREAM_BUCKETS,
      registers,
    });
    this.toolDuration = new Histogram({
      name: 'trs_tool_duration_seconds',
      help: 'Server tool calls run by this process, by tool and outcome (ok, error: the tool threw).',
      labelNames: ['tool', 'outcome'],
      buckets: TOOL_BUCKETS,
      registers,
    });
    this.commitDuration = new Histogram({
      name: 'trs_commit_duration_seconds',
      help: 'An engine commit (one fenced script call), including retries through a store outage.',
      buckets: REDIS_BUCKETS,
      registers,
    });
    this.commitRetries = new Counter({
      name: 'trs_commit_retries_total',
      help: 'Commits sent again after the store was unreachable (the marker showed they had not landed).',
      registers,
    });
    this.leaseTakeovers = new Counter({
      name: 'trs_lease_takeovers_total',
      help: "Runs this process claimed from the due sweep: another owner's lease had expired or was handed over.",
      registers,
    });
    this.activeRuns = new Gauge({
      name: 'trs_active_runs',
      help: 'Runs this process drives now.',
      registers,
      collect() {
        this.set(runs()?.activeRuns ?? 0);
      },
    });
    this.waitingRuns = new Gauge({
      name: 'trs_waiting_runs',
      help: 'Runs waiting in this process for a slot (MAX_ACTIVE_RUNS).',
      registers,
      collect() {
        this.set(runs()?.waitingRuns ?? 0);
      },
    });
    this.eventsRelayed = new Counter({
      name: 'trs_events_relayed_total',
      help: 'Session events fanned out to live WebSocket/SSE clients (once per event, however many clients).',
      registers,
    });
    this.liveEventsDropped = new Counter({
      name: 'trs_live_events_dropped_total',
      help:
        "A run's live events (turn.started, stream deltas, a turn's end written ahead of its commit) never written " +
        'to the log, by reason: buffer_full (over the stream relay bound while Redis was slower than the stream) ' +
        'outage (still failing after the lease TTL, or the run stopped) or error (a failure that is no outage). Live ' +
        'clients miss them; the history is whole.',
      labelNames: ['reason'],
      registers,
    });
    this.relayLag = new Histogram({
      name: 'trs_relay_lag_seconds',
      help:
        "From an event's append to the log (Redis time) to its write to the live clients' sockets; " +
        'the oldest event of each fanned-out batch. Includes any clock skew between Redis and this host.',
      buckets: REDIS_BUCKETS,
      registers,
    });
    this.replayPages = new Counter({
      name: 'trs_replay_pages_total',
      help: 'Pages of the event log read for clients: WS/SSE replays (stream) and JSON pages (poll).',
      labelNames: ['source'],
      registers,
    });
    this.streamsOpened = new Counter({
      name: 'trs_event_streams_total',
      help: 'Event streams opened, by transport.',
      labelNames: ['transport'],
      registers,
    });
    this.streamConnections = new Gauge({
      name: 'trs_event_stream_connections',
      help: 'Event streams open now, by transport.',
      labelNames: ['transport'],
      registers,
    });
    this.responseBytesHeld = new Gauge({
      name: 'trs_response_bytes_held',
      help: 'Bytes of REST answers written and not yet taken by their clients.',
      registers,
    });
    this.slowReaderCloses = new Counter({
      name: 'trs_event_stream_slow_closes_total',
      help: 'Event streams closed because the client read too slowly, by transport.',
      labelNames: ['transport'],
      registers,
    });
    this.redisErrors = new Counter({
      name: 'trs_redis_errors_total',
      help: 'Errors of the Redis connections (command and subscriber) and commands that timed out (kind command_timeout), by kind.',
      labelNames: ['kind'],
      registers,
    });
    this.upstreamRequests = new Counter({
      name: 'trs_upstream_requests_total',
      help: 'HTTP attempts to the Messages API (each SDK retry counts), by status class (2xx, 4xx, 5xx, none) and error type.',
      labelNames: ['status_class', 'error_type'],
      registers,
    });
    this.upstreamRetries = new Counter({
      name: 'trs_upstream_retries_total',
      help: 'Model requests made again after a failed one: by the SDK (429, 5xx, connection errors, timeouts) and by the engine (a stream cut mid-turn).',
      registers,
    });
    this.upstreamStreamErrors = new Counter({
      name: 'trs_upstream_stream_errors_total',
      help: 'Model requests whose answer failed after its headers, by error type: an error event in the stream (its error.type, e.g. overloaded_error) or the body cut or stalled (stream_error).',
      labelNames: ['error_type'],
      registers,
    });
    this.httpErrors = new Counter({
      name: 'trs_http_errors_total',
      help: 'HTTP answers with a 4xx or 5xx status, by route pattern, method, status and error code.',
      labelNames: ['route', 'method', 'status', 'code'],
      registers,
    });
    this.webhookDeliveries = new Counter({
      name: 'trs_webhook_deliveries_total',
      help: 'Settled webhook delivery attempts, by outcome (delivered, retrying, gave_up, disabled, stale, gone).',
      labelNames: ['outcome'],
      registers,
    });
    this.toolTasks = new Counter({
      name: 'trs_tool_tasks_total',
      help: "Tool tasks (worker and http tools) by event: queued, claimed, retried (a lease lost; an http try failed), timed_out (failed: no worker answered; an http tool's tries used up), completed, cancelled.",
      labelNames: ['event'],
      registers,
    });
    this.toolTaskClaimLatency = new Histogram({
      name: 'trs_tool_task_claim_latency_seconds',
      help: 'From a tool task queued (or offered again) to its claim by a worker.',
      buckets: [0.005, 0.02, 0.1, 0.5, 1, 5, 30, 120, 600],
      registers,
    });
    this.toolWorkersActive = new Gauge({
      name: 'trs_tool_workers_active',
      help: 'Distinct workers (worker_id) that claimed or heartbeated on this replica within the task lease.',
      registers,
    });
    for (const event of ['queued', 'claimed', 'retried', 'timed_out', 'completed', 'cancelled'])
      this.toolTasks.inc({ event }, 0);
    this.tenantLabel = opts.tenantLabel ?? false;
    const tenant = this.tenantLabel ? (['tenant'] as const) : [];
    this.tokens = new Counter({
      name: 'trs_tokens_total',
      help: 'Tokens of model turns, by model family and kind (input, output, cache_write, cache_read).',
      labelNames: ['model_family', 'kind', ...tenant],
      registers,
    });
    this.costUsd = new Counter({
      name: 'trs_cost_usd_total',
      help: 'Cost of model turns at list prices (US dollars), by model family; turns without a price add nothing.',
      labelNames: ['model_family', ...tenant],
      registers,
    });
    // Zero series for the label values every dashboard panel reads, so a query finds them before the first event.
    for (const transport of ['ws', 'sse'] as const) {
      this.streamsOpened.inc({ transport }, 0);
      this.streamConnections.set({ transport }, 0);
      this.slowReaderCloses.inc({ transport }, 0);
    }
    for (const source of ['stream', 'poll'] as const) this.replayPages.inc({ source }, 0);
    if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  /** The engine whose run counts the gauges report. */
  observeRuns(runs: RunCounts): void {
    this.runs = runs;
  }

  /** Counts a settled webhook delivery attempt (the webhooks dispatcher). */
  webhook(outcome: WebhookOutcome): void {
    this.webhookDeliveries.inc({ outcome });
  }

  /** Counts a turn by its stop reason (a closed set). */
  turn(stopReason: string | null | undefined): void {
    this.turns.inc({ stop_reason: stopReason && STOP_REASONS.has(stopReason) ? stopReason : 'other' });
  }

  /** Counts a turn's tokens and cost (`family` null: the model has no price). */
  spend(family: string | null, tenant: string, t: TurnSpend): void {
    const base = { model_family: family ?? 'unknown', ...(this.tenantLabel ? { tenant } : {}) };
    for (const kind of ['input', 'output', 'cache_write', 'cache_read'] as const)
      if (t[kind] > 0) this.tokens.inc({ ...base, kind }, t[kind]);
    if (t.costMicros) this.costUsd.inc(base, t.costMicros / 1e6);
  }

  /** Prometheus text exposition of every metric. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

/** Milliseconds (performance.now() differences, as the engine measures) to the seconds Prometheus wants. */
export const seconds = (ms: number): number => ms / 1000;

/** The kind of an ioredis error, from its code or class (a closed set, whatever the error says). */
export function redisErrorKind(err: unknown): RedisErrorKind {
  const e =
    typeof err === 'object' && err !== null
      ? { code: get(err, 'code'), name: get(err, 'name'), message: get(err, 'message') }
      : null;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (code === 'ECONNREFUSED') return 'connection_refused';
  if (code === 'ECONNRESET' || code === 'EPIPE' || code === 'ECONNABORTED') return 'connection_reset';
  if (code === 'ETIMEDOUT' || /timed? ?out/i.test(String(e?.message ?? ''))) return 'timeout';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'dns';
  if (typeof e?.name === 'string' && /Cluster/.test(e.name)) return 'cluster';
  return 'other';
}

function get(obj: object, key: string): unknown {
  return key in obj ? Reflect.get(obj, key) : undefined;
}
