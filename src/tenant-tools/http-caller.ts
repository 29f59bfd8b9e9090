/**
 * The service's own claimant of http tools' calls: every replica claims from the `~http` queue of the tenants that
 * have such calls (`tt:http`), so a call is durable exactly as a worker's is: claimed under a lease it renews while
 * the URL answers, offered again after a failed try with backoff and jitter (`release`), failed after
 * `max_attempts`, taken over by another replica when this one dies mid-call (its lease lapses). The queues are looked
 * at every `pollMs` (one SMEMBERS and a claim each). A tenant leaves `tt:http` when a claim finds none of its http
 * calls queued (tasks.ts `httpIdle`), and comes back when one is queued again, so the set holds only the tenants
 * with such calls, not every tenant that ever had one.
 *
 * A try is aborted as soon as its call is cancelled on any replica (the tenant's `stop` channel, http-stops.ts), and
 * failing that at its next heartbeat.
 */
import { SweepLoop } from '../sweep-loop.js';
import type { FastifyBaseLogger } from 'fastify';
import type { Metrics } from '../observability/metrics.js';
import { toolResultFields } from '../schemas.js';
import { DEFAULT_JSON_MAX_DEPTH, DEFAULT_JSON_MAX_KEYS, jsonBoundsExceeded } from '../json-depth.js';
import { hasLoneSurrogate } from '../json-unicode.js';
import type { SessionStore } from '../store/store.js';
import type { SecretBox } from '../webhooks/secrets.js';
import { callToolUrl } from './http-call.js';
import { HttpStops } from './http-stops.js';
import type { TenantToolRunner } from './types.js';
import type { RedisClient } from '../store/lua-commands.js';
import { awaits, type ToolTasks } from './service.js';
import {
  HTTP_QUEUE,
  claimWaitSeconds,
  claimedTask,
  type ClaimedTask,
  type TaskRecord,
} from './task-record.js';

const withoutLease = ({ lease_expires_at: _lease, lease_ms: _ms, ...call }: ClaimedTask) => call;
import type { TaskQueue } from './tasks.js';
import { FailureLog } from '../log.js';

interface HttpCallerOptions {
  queue: TaskQueue;
  tasks: ToolTasks;
  store: SessionStore;
  /** The subscriber connection (the tenants' `stop` channels, while they have tries in flight here). */
  sub: RedisClient;
  box: SecretBox;
  allowPrivate: boolean;
  maxResultBytes: number;
  log: FastifyBaseLogger;
  /** `trs_tool_tasks_total` and the claim latency count these calls as they count a worker's. */
  metrics: Metrics;
  /** Calls in flight on this replica at most (HTTP_CALLS_MAX). */
  concurrency?: number;
  /** Calls of one tenant in flight on this replica at most (HTTP_CALLS_PER_TENANT). */
  perTenant?: number;
  pollMs?: number;
}

/**
 * Calls in flight on a replica, and of one tenant. A call holds its slot for as long as its URL takes (up to the
 * runner's `timeout_ms`), so one tenant whose URL hangs must not hold them all: it gets at most HTTP_CALLS_PER_TENANT,
 * and the tenants are claimed for in turns (a rotating start), so the others' calls go on meanwhile.
 */
const HTTP_CALLS_MAX = 32;
const HTTP_CALLS_PER_TENANT = 8;

/** Default deadline of one try (ms), when the tool's runner gives none. */
const DEFAULT_TRY_MS = 30_000;

/** Backoff before the next try: 1 s doubling per attempt up to 60 s, with full jitter over its upper half. */
const retryDelay = (attempt: number) => {
  const base = Math.min(60_000, 1000 * 2 ** Math.max(0, attempt - 1));
  return Math.round(base / 2 + (Math.random() * base) / 2);
};

/** An http tool as a session's copy defines it: its runner, and its secret (sealed). */
interface HttpTool {
  runner: Extract<TenantToolRunner, { type: 'http' }>;
  secret: string;
}

type HttpCallOutcome = Awaited<ReturnType<typeof callToolUrl>>;

export class HttpToolCaller {
  private inFlight = 0;
  /** Calls in flight by tenant (entries removed at 0). */
  private readonly byTenant = new Map<string, number>();
  /** Where the next poll starts in the tenants' list: each poll one further, so no tenant always comes first. */
  private turn = 0;
  private readonly worker = `service-${process.pid}`;

  private readonly polls: SweepLoop;
  private readonly stops: HttpStops;

  constructor(private readonly o: HttpCallerOptions) {
    this.stops = new HttpStops(o.sub);
    this.polls = new SweepLoop(() => this.poll(), o.pollMs ?? 250, new FailureLog(o.log, 'http tool poll'));
  }

  start(): void {
    this.polls.start(this.o.pollMs ?? 250);
  }

  async stop(): Promise<void> {
    await this.polls.stop();
    this.stops.close();
  }

  private async poll(): Promise<void> {
    const max = this.o.concurrency ?? HTTP_CALLS_MAX;
    const perTenant = this.o.perTenant ?? HTTP_CALLS_PER_TENANT;
    const tenants = await this.o.queue.httpTenants();
    const start = tenants.length ? this.turn++ % tenants.length : 0;
    for (let i = 0; i < tenants.length; i++) {
      const tenant = tenants[(start + i) % tenants.length]!;
      const free = Math.min(max - this.inFlight, perTenant - (this.byTenant.get(tenant) ?? 0));
      if (this.inFlight >= max || this.polls.stopping) return;
      if (free <= 0) continue;
      const got = await this.o.queue.claim(tenant, [HTTP_QUEUE], free, this.worker);
      if (got.length === 0) await this.o.queue.httpIdle(tenant);
      for (const { rec, input, owed } of got) {
        this.o.metrics.toolTasks.inc({ event: 'claimed' });
        this.o.metrics.toolTaskClaimLatency.observe(claimWaitSeconds(rec, this.o.queue.leaseMs));
        this.inFlight++;
        this.byTenant.set(tenant, (this.byTenant.get(tenant) ?? 0) + 1);
        void this.run(rec, input, owed)
          .catch((err) => this.o.log.warn({ err, tenant, tool: rec.name }, 'http tool call failed'))
          .finally(() => {
            this.inFlight--;
            const n = (this.byTenant.get(tenant) ?? 1) - 1;
            if (n > 0) this.byTenant.set(tenant, n);
            else this.byTenant.delete(tenant);
          });
      }
    }
  }

  /**
   * One try of a claimed call, aborted by `stop` as soon as its call is no longer this offer's to answer: a cancel or
   * delete on any replica settled it (the tenant's `stop` channel, heard from before the session is read: see
   * `HttpStops.watch`), or a heartbeat was refused or found the session no longer waiting (`renew`). Left running, it
   * would hold its URL's connection and one of the tenant's slots here until the runner's `timeout_ms` (up to 600 s),
   * for a result no script would take. Nothing is written for a stopped try.
   */
  private async run(rec: TaskRecord, input: unknown, owed: readonly TaskRecord[]): Promise<void> {
    const stop = new AbortController();
    await this.stops.watch(rec.tenant, rec.offer, stop);
    try {
      await this.attempt(rec, input, owed, stop);
    } finally {
      this.stops.unwatch(rec.tenant, rec.offer);
    }
  }

  /**
   * One try: the tool as its session's copy defines it now, the call's `tool.started`, its URL's answer, and what
   * that answer writes (a result; or a failure, the call offered again or, after its last attempt, failed).
   */
  private async attempt(
    rec: TaskRecord,
    input: unknown,
    owed: readonly TaskRecord[],
    stop: AbortController,
  ): Promise<void> {
    const tool = await this.toolOf(rec);
    if (tool === 'cancelled') return;
    if (tool === null) return this.answerNotHttp(rec);
    // Before the call: its `tool.started` (after the `tool_task.retried` events still owed) comes ahead of its
    // result in the log.
    await this.o.tasks.logStarted(rec, input, this.worker, owed);
    const outcome = await this.call(rec, input, tool, stop);
    if (outcome.kind === 'stopped') return;
    const answer = answerOf(outcome, this.o.maxResultBytes);
    if ('result' in answer) await this.complete(rec, answer.result);
    else await this.retryOrFail(rec, answer.failure);
  }

  /**
   * The http tool a try calls, as its session's copy defines it; `cancelled` when the session no longer waits for the
   * call (it was settled as cancelled), null when the copy is no longer an http tool with a secret.
   */
  private async toolOf(rec: TaskRecord): Promise<HttpTool | 'cancelled' | null> {
    let s = await this.o.store.load(rec.session);
    // Called only while its session waits for it: not once it was cancelled (or answered otherwise), here at each
    // try after a failed one as at the first. Unless a run queued it again since its claim (resumed, answered: the
    // cancel is refused, service.ts `cancelled`), read then with its session as it is now.
    if (!s || !awaits(s, rec)) {
      if (await this.o.queue.cancelUnlessWanted(rec)) return 'cancelled';
      s = await this.o.store.load(rec.session);
    }
    const def = s?.tenant === rec.tenant ? s.tenantTools[rec.name] : undefined;
    if (!def || def.runner.type !== 'http' || !def.secret) return null;
    return { runner: def.runner, secret: def.secret };
  }

  /**
   * The session waits, but its copy of the tool has no URL to call any more (a PATCH naming the tool copied it anew,
   * as a worker tool, while this call waited): the call is answered with an error, so the session goes on (settled
   * as cancelled, it would wait for ever: nothing else answers a call of the `~http` queue).
   */
  private async answerNotHttp(rec: TaskRecord): Promise<void> {
    const done = await this.o.queue.complete(
      rec.tenant,
      rec.offer,
      errorResult(
        `Error: not run: ${rec.name} is no longer an http tool of this session (its definition changed while the call waited)`,
      ),
    );
    if (typeof done !== 'string') await this.o.tasks.deliver(rec.tenant, rec.call);
  }

  /** One call of the tool's URL, its lease renewed meanwhile (`renew`, every third of the lease). */
  private async call(
    rec: TaskRecord,
    input: unknown,
    tool: HttpTool,
    stop: AbortController,
  ): Promise<HttpCallOutcome> {
    // The heartbeat stops the try when it learns it is no longer this offer's to answer (a stop message lost): a
    // cancel or delete settled the call (`cancelled`), another offer holds it (`lost`), it has its result, or its
    // record is gone.
    let finished = false;
    const beat = setInterval(
      () => void this.renew(rec, stop, () => finished).catch(() => {}),
      this.o.queue.leaseMs / 3,
    );
    try {
      return await callToolUrl({
        url: tool.runner.url,
        secret: this.o.box.open(tool.secret),
        // The webhook-id is the call's (`<idempotency_key>#<round>`), the same on every attempt as a webhook's is
        // (§6.3), so a receiver dedupes on it; the offer id (the body's `id`) is each attempt's own. A call resumed
        // after a failure is a new round, a call of its own.
        msgId: rec.call,
        // The call as a worker's claim answers it, without the lease (the caller holds it for the HTTP tool).
        body: JSON.stringify(withoutLease(claimedTask(rec, input, this.o.queue.leaseMs))),
        timeoutMs: tool.runner.timeout_ms ?? DEFAULT_TRY_MS,
        maxBytes: this.o.maxResultBytes,
        allowPrivate: this.o.allowPrivate,
        stop: stop.signal,
      });
    } finally {
      finished = true;
      clearInterval(beat);
    }
  }

  /** Writes the call's result (`{content, is_error}` as JSON) and hands it to its session. */
  private async complete(rec: TaskRecord, result: string): Promise<void> {
    const done = await this.o.queue.complete(rec.tenant, rec.offer, result);
    if (typeof done !== 'string') {
      this.o.metrics.toolTasks.inc({ event: 'completed' });
      await this.o.tasks.deliver(rec.tenant, rec.call);
    }
  }

  /** Offers the call again after a failed try (with backoff), or fails it after its last attempt. */
  private async retryOrFail(rec: TaskRecord, failure: string): Promise<void> {
    const next = await this.o.queue.release(
      rec.tenant,
      rec.offer,
      retryDelay(rec.attempt),
      `Error: ${rec.name} failed ${rec.attempt} time(s); the last: ${failure}`,
      failure,
    );
    if (next.kind === 'retried') {
      this.o.metrics.toolTasks.inc({ event: 'retried' });
      // Its `tool_task.retried` (`http_failed`, the failure), as a lost lease's: before the next try's `tool.started`
      // (a claim of the call pays a debt still owed first).
      await this.o.tasks.payRetried(next.owed);
    }
    if (next.kind === 'failed') {
      this.o.metrics.toolTasks.inc({ event: 'timed_out' });
      await this.o.tasks.deliver(rec.tenant, rec.call);
    }
  }

  /**
   * One heartbeat of a try in flight: renews its lease, or stops the try when the offer no longer holds its call (a
   * refusal), or when its session no longer waits for the call though the queue still has it leased (a cancel or
   * delete whose settle failed: dropTasks is best effort), which is then settled as cancelled, as a worker's
   * heartbeat settles it (service.ts `heartbeat`). `finished`: the try ended meanwhile; its own outcome is written
   * by `run` (a result the session then took makes it no longer wait: that call is not settled here).
   */
  private async renew(rec: TaskRecord, stop: AbortController, finished: () => boolean): Promise<void> {
    const r = await this.o.queue.heartbeat(rec.tenant, rec.offer);
    if (finished()) return;
    if (typeof r === 'string') {
      stop.abort();
      return;
    }
    const s = await this.o.store.load(rec.session);
    if (finished() || (s && awaits(s, rec))) return;
    // Queued again by a run since the heartbeat read the record: awaited after all, the try goes on.
    if (!(await this.o.queue.cancelUnlessWanted(r))) return;
    stop.abort();
    this.o.metrics.toolTasks.inc({ event: 'cancelled' });
  }
}

/** An error result, as JSON. */
const errorResult = (content: string) => JSON.stringify({ content, is_error: true });

/**
 * What a try's outcome writes: the call's `result` (JSON `{content, is_error}`: the answer's, or an error that the
 * same answer again would give again), or the `failure` of a try that is tried again.
 */
function answerOf(
  outcome: Exclude<HttpCallOutcome, { kind: 'stopped' }>,
  maxResultBytes: number,
): { result: string } | { failure: string } {
  if (outcome.kind === 'too_large')
    return {
      result: errorResult(
        `Error: the tool's answer is more than TOOL_RESULT_MAX_BYTES (${maxResultBytes}) bytes`,
      ),
    };
  if (outcome.kind === 'failed') return { failure: outcome.error };
  if (outcome.status < 200 || outcome.status > 299) return { failure: `HTTP ${outcome.status}` };
  const parsed = parseAnswer(outcome.body);
  // Taken as it is, it would reach the Messages API, which refuses the request (every turn after it too); the same
  // answer again would be refused again: an error result at once, as for one too large.
  if (parsed === 'ill_formed')
    return {
      result: errorResult(
        `Error: the tool's answer holds a lone surrogate (an escape \\uD800-\\uDFFF without its pair); a result must be well-formed Unicode`,
      ),
    };
  if (parsed) return { result: JSON.stringify(parsed) };
  return {
    failure: 'the answer is not JSON {"content", "is_error"?} (nested at most 64 levels, 256 keys an object)',
  };
}

/**
 * The answer's `{content, is_error}`, `ill_formed` when one of its strings holds a lone surrogate, or null when it is
 * not one. Bounded as request bodies are (64 levels, 256 keys an object) before it is parsed: a third party's JSON,
 * bound for the session's history.
 */
function parseAnswer(body: string): { content: unknown; is_error: boolean } | 'ill_formed' | null {
  const bytes = Buffer.from(body);
  if (jsonBoundsExceeded(bytes, DEFAULT_JSON_MAX_DEPTH, DEFAULT_JSON_MAX_KEYS) !== null) return null;
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return null;
  }
  // Fields besides these two (a framework's `request_id`, a trace id) are the receiver's own: ignored, as a webhook
  // receiver's answer is, where a worker's result (our own route's body) refuses them.
  const r = toolResultFields.safeParse(answerFields(value));
  if (!r.success) return null;
  // A lone surrogate: JSON.parse takes its escape, the Messages API does not (as request bodies are, json-unicode.ts).
  if (hasLoneSurrogate(bytes, r.data)) return 'ill_formed';
  return { content: r.data.content, is_error: r.data.is_error ?? false };
}

/** `{content, is_error}` of an answer object, anything else as it is (refused by the result's schema). */
function answerFields(value: unknown): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  const { content, is_error } = value as Record<string, unknown>;
  return is_error === undefined ? { content } : { content, is_error };
}
