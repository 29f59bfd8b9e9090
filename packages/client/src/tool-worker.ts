/**
 * `ToolWorker`: runs a tenant's tools in your process for the service's sessions (spec §7.1, docs/API.md "Tool
 * workers"). It takes the SDK's own runnable tools — the objects `betaZodTool` / `betaTool` return, as
 * `client.beta.messages.toolRunner` takes them — registers them (`PUT /v1/tools/:name`, runner `worker`), claims
 * their calls (long-poll), runs each as the SDK's runner does (the tool's `parse`, then `run`; a `ToolError`'s
 * content or `Error: <message>` as an `is_error` result), heartbeats while it runs, submits the result (retried
 * with backoff), rides out a restart of the service, and stops gracefully. No dependency on the SDK: the tools are
 * used through their shape.
 *
 * Past 400 lines as one file: the claim loop, each call's heartbeat, abort and grace, and the result's resending
 * share one call state and the one start/stop state machine; split, each part would hold half of the invariants.
 */
import { isJsonType, isObject } from './answer.js';
import { ConnectionError, retryAfterMs } from './errors.js';
import type { FetchLike } from './http.js';

type ResultContent = string | Array<Record<string, unknown> & { type: string }>;
type Result = { content: ResultContent; is_error: boolean };

/** A runnable tool as the SDK's `betaZodTool` / `betaTool` make it. */
export interface WorkerTool {
  name: string;
  description?: string | undefined;
  /** Absent on the SDK's Anthropic-defined tools (bash, …): those cannot be worker tools. */
  input_schema?: object | undefined;
  parse?: ((input: unknown) => unknown) | undefined;
  run: (input: never, context?: never) => unknown;
}

/** A claimed call (the service's `ToolTask`). */
export interface ToolTask {
  id: string;
  session_id: string;
  tool_use_id: string;
  name: string;
  input: unknown;
  attempt: number;
  idempotency_key: string;
  lease_expires_at: string;
  /** The lease's length (ms) from the answer; absent from a service before it. */
  lease_ms?: number;
}

export interface ToolWorkerOptions {
  baseUrl: string;
  apiKey?: string | undefined;
  tools: WorkerTool[];
  /** Calls run at once (default 4). */
  concurrency?: number | undefined;
  /** Names this worker in `tool.started` events and in `GET /v1/tools` (default: random). */
  workerId?: string | undefined;
  /**
   * Register the tools at start (default true); their `timeout_ms` / `max_attempts` / `idempotent` / `read_only` if
   * given. A tool registered already keeps the settings these do not name (set through the API, say).
   */
  register?:
    | boolean
    | { timeout_ms?: number; max_attempts?: number; idempotent?: boolean; read_only?: boolean }
    | undefined;
  /**
   * How long one claim waits for a call (ms, default 20000, at most 30000). `stop()` lets the claim in flight return
   * (it may bring calls the service has leased to this worker), so it can take this long before the calls end (15 s
   * more at most, when the connection has stalled).
   */
  waitMs?: number | undefined;
  /**
   * How long a tool whose call is over for this worker (lost: its lease went to another attempt, the session was
   * cancelled, the call completed or timed out) is given to end once its `signal` aborts (ms, default 5000). A tool
   * that ignores its signal longer frees its slot then: its eventual result is discarded, `onError` is told
   * (`'tool'`), and `stop()` no longer waits for it.
   */
  abortGraceMs?: number | undefined;
  fetch?: FetchLike | undefined;
  /**
   * Told of failures the worker rides out (a claim, the registration after a restart, a submit retried, a tool that
   * outlived its call's end by `abortGraceMs`). What it throws is ignored: the worker goes on.
   */
  onError?: ((err: unknown, what: string) => void) | undefined;
}

/**
 * Whether `e` is the SDK's `ToolError` (or a subclass): without a dependency on the SDK, by its class's name in the
 * prototype chain or the `name` its constructor sets (either survives a bundler renaming the other).
 */
function isToolError(e: Error): e is Error & { content: ResultContent } {
  if (!('content' in e) || !(typeof e.content === 'string' || Array.isArray(e.content))) return false;
  if (e.name === 'ToolError') return true;
  for (let p: unknown = Object.getPrototypeOf(e); p && p !== Error.prototype; p = Object.getPrototypeOf(p)) {
    const ctor: unknown = (p as { constructor?: unknown }).constructor;
    if (typeof ctor === 'function' && ctor.name === 'ToolError') return true;
  }
  return false;
}

/**
 * What the SDK's runner makes of a thrown value (its `toolErrorContent`): a `ToolError`'s content, else
 * `Error: <message>` — an other error's `content` field included, which the SDK ignores too.
 */
function thrownContent(e: unknown): ResultContent {
  if (e instanceof Error && isToolError(e)) return e.content;
  return `Error: ${e instanceof Error ? e.message : String(e)}`;
}

class HttpStatus extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    /** The answer's `Retry-After` (ms), if any. */
    readonly retryAfterMs: number | undefined,
  ) {
    super(`HTTP ${status} ${code}`);
  }
}

/** Whether a failed request may succeed if sent again: no answer (or not the API's), 408, 429 or a 5xx. */
const transient = (err: unknown) =>
  err instanceof ConnectionError ||
  (err instanceof HttpStatus && (err.status === 408 || err.status === 429 || err.status >= 500));

/** Resolves after `ms`, or at once when `signal` aborts (its listener removed either way). */
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });

/** A claim that brought nothing is followed by the next one at least this long after it began (ms): `waitMs: 0`. */
const MIN_POLL_MS = 1000;

/** The service's shortest lease (TOOL_TASK_LEASE_MS, ms). */
const MIN_LEASE_MS = 1000;

/**
 * A claimed task's lease length (ms): its `lease_ms`, which needs no clock. From a service without it, the service's
 * clock alone: `lease_expires_at` less the claim answer's `Date`, so a worker whose clock is off by any amount
 * heartbeats in time. `Date` has whole seconds (the service's now is up to 1 s past it), so a second is taken off:
 * the lease is never overestimated. Without a `Date` header (a proxy dropped it) the worker's own clock is all there
 * is.
 */
function leaseOf(task: ToolTask, serverNow: number | null): number {
  if (typeof task.lease_ms === 'number' && task.lease_ms > 0) return Math.max(MIN_LEASE_MS, task.lease_ms);
  const expires = Date.parse(task.lease_expires_at);
  const ms = serverNow === null ? expires - Date.now() : expires - serverNow - 1000;
  return Math.max(MIN_LEASE_MS, Number.isNaN(ms) ? MIN_LEASE_MS : ms);
}

/** The most calls one claim may ask for (the service's bound on `max`). */
const MAX_CLAIM = 100;

/** How long past its `wait_ms` a claim's answer may take before the connection counts as stalled (ms). */
const CLAIM_GRACE_MS = 15_000;

/** Exponential backoff with full jitter: attempt 0 → up to 200 ms, doubling up to 5 s. */
const backoff = (attempt: number) => Math.random() * Math.min(5000, 200 * 2 ** attempt);

/**
 * The longest `timeout_ms` the service gives a tool: the deadline of a call whose tool's timeout this worker does not
 * know (`register: false`).
 */
const MAX_TOOL_TIMEOUT_MS = 3_600_000;

/** `abortGraceMs` by default. */
const ABORT_GRACE_MS = 5000;

/** One run of the worker: from a `start()` to the end of the `stop()` after it. */
interface Run {
  /** Aborted by `stop()`: ends the registration under way, then the claim loop. */
  readonly stopping: AbortController;
  /** The start (the registration, then the claim loop begun): every `start()` of the run shares it. */
  started: Promise<void>;
  /** The claim loop, once registered; null before, and for good when a `stop()` came first. */
  loop: Promise<void> | null;
}

export class ToolWorker {
  readonly workerId: string;
  private readonly tools = new Map<string, WorkerTool>();
  private readonly concurrency: number;
  /** One claim's long poll (ms): also the longest `stop()` waits for the claim in flight to return. */
  private readonly waitMs: number;
  private readonly abortGraceMs: number;
  private readonly fetchFn: FetchLike;
  private readonly inFlight = new Set<Promise<void>>();
  /** Each tool's `timeout_ms` as the service answered its registration. */
  private readonly timeouts = new Map<string, number>();
  /** The run started and not stopped yet (null: none). A `start()` begins one only when there is none. */
  private run: Run | null = null;
  /** The `stop()` under way: a second `stop()` shares it; a `start()` waits for it, then begins a new run. */
  private halting: Promise<void> | null = null;

  constructor(private readonly o: ToolWorkerOptions) {
    for (const t of o.tools) this.tools.set(t.name, t);
    this.concurrency = Math.max(1, Math.floor(o.concurrency ?? 4));
    this.waitMs = Math.max(0, Math.floor(Math.min(o.waitMs ?? 20_000, 30_000)));
    this.abortGraceMs = Math.max(0, o.abortGraceMs ?? ABORT_GRACE_MS);
    this.workerId = o.workerId ?? `worker-${Math.random().toString(36).slice(2, 10)}`;
    this.fetchFn = o.fetch ?? ((req: Request) => fetch(req));
  }

  /** Calls running now. */
  get running(): number {
    return this.inFlight.size;
  }

  private async call<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    return (await this.request<T>(method, path, body, signal)).body;
  }

  /** A request's answer, with the service's clock when it answered (its `Date` header, ms; null without one). */
  private async request<T>(
    method: string,
    path: string,
    body?: unknown,
    signal?: AbortSignal,
  ): Promise<{ body: T; date: number | null }> {
    const req = new Request(this.o.baseUrl.replace(/\/$/, '') + path, {
      method,
      headers: {
        'content-type': 'application/json',
        ...(this.o.apiKey ? { authorization: `Bearer ${this.o.apiKey}` } : {}),
      },
      ...(method === 'GET' ? {} : { body: JSON.stringify(body ?? {}) }),
      ...(signal ? { signal } : {}),
    });
    let res: Response;
    let text: string;
    try {
      res = await this.fetchFn(req);
      text = await res.text();
    } catch (err) {
      // No answer, or one cut short (a network error, the service down, a timeout): worth another try.
      throw new ConnectionError(`${method} ${path}: no answer (${String(err)})`, { cause: err });
    }
    let parsed: unknown = null;
    let notJson: unknown;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch (err) {
      notJson = err;
    }
    if (!res.ok) {
      // An error answer's body is read leniently: a proxy's 502 page is a 502 all the same.
      const code =
        isObject(parsed) && isObject(parsed['error']) ? String(parsed['error']['code']) : 'unknown';
      throw new HttpStatus(res.status, code, retryAfterMs(res.headers.get('retry-after')));
    }
    // Every 2xx answer of the worker protocol is a JSON object: anything else is not the API (a proxy's page).
    const type = res.headers.get('content-type');
    if (notJson !== undefined || !isJsonType(type) || !isObject(parsed)) {
      throw new ConnectionError(
        `${method} ${path}: a ${res.status} answer${type ? ` of type ${type}` : ''} that is not the API's JSON`,
        { cause: notJson },
      );
    }
    const date = Date.parse(res.headers.get('date') ?? '');
    return { body: parsed as T, date: Number.isNaN(date) ? null : date };
  }

  /** What `onError` is told; what it throws does not stop the worker. */
  private told(err: unknown, what: string): void {
    try {
      this.o.onError?.(err, what);
    } catch {
      // The worker's own loop goes on whatever the callback does.
    }
  }

  /**
   * Registers the tools (unless `register: false`), then claims and runs calls until `stop()`. A service not up yet
   * (no answer, 5xx, 429) is waited for, with backoff; a definition it refuses (4xx) rejects, and a later `start()`
   * tries again. A `start()` while one is under way or the worker runs shares it (one claim loop). A `stop()` during
   * a start wins: the registration in flight is aborted, the start resolves without claiming, and a `start()` after
   * that stop begins afresh. A `start()` during a `stop()` begins once the stop has ended.
   */
  async start(): Promise<void> {
    // Whatever the stop's end, a run is over after it.
    while (this.halting) await this.halting.catch(() => undefined);
    if (this.run) return this.run.started;
    const run: Run = { stopping: new AbortController(), started: Promise.resolve(), loop: null };
    this.run = run;
    run.started = this.begin(run).catch((err: unknown) => {
      // Refused: nothing runs, so the next start() registers again.
      if (this.run === run) this.run = null;
      throw err;
    });
    return run.started;
  }

  /** `run`'s start: the registration (waiting for the service), then its claim loop unless stopped meanwhile. */
  private async begin(run: Run): Promise<void> {
    const signal = run.stopping.signal;
    if (this.o.register !== false) {
      for (let attempt = 0; !signal.aborted; attempt++) {
        try {
          await this.registerAll(signal);
          break;
        } catch (err) {
          // Stopped meanwhile (its request aborted with it): the stop wins, as below.
          if (signal.aborted) return;
          if (!transient(err)) throw err;
          this.told(err, 'register');
          await sleep(backoff(attempt), signal);
        }
      }
    }
    // A stop that came during the registration leaves nothing claiming.
    if (!signal.aborted) run.loop = this.claimLoop(signal);
  }

  /** Registers every tool; `signal` (a stop) aborts it (a PUT cut short is harmless: the next one replaces it). */
  private async registerAll(signal?: AbortSignal): Promise<void> {
    const extra = typeof this.o.register === 'object' ? this.o.register : {};
    for (const t of this.tools.values()) {
      if (!t.input_schema) throw new Error(`${t.name}: a worker tool needs an input_schema`);
      const path = `/v1/tools/${encodeURIComponent(t.name)}`;
      const definition = {
        description: t.description ?? '',
        input_schema: t.input_schema,
        runner: { type: 'worker' },
      };
      // A tool registered already keeps the settings this worker does not name (the PUT replaces the whole tool).
      let kept: Record<string, unknown> = {};
      try {
        const now = await this.call<Record<string, unknown>>('GET', path, undefined, signal);
        kept = Object.fromEntries(
          ['timeout_ms', 'max_attempts', 'idempotent', 'read_only']
            .filter((k) => now[k] !== undefined && now[k] !== null)
            .map((k) => [k, now[k]]),
        );
      } catch (err) {
        if (!(err instanceof HttpStatus && err.status === 404)) throw err;
      }
      const put = await this.call<Record<string, unknown>>(
        'PUT',
        path,
        { ...definition, ...kept, ...extra },
        signal,
      );
      // The tool's calls end by this long after they were queued: how long one's result is worth sending (runTask).
      const timeout = put['timeout_ms'];
      if (typeof timeout === 'number' && timeout > 0) this.timeouts.set(t.name, timeout);
    }
  }

  /**
   * Claims while not stopping. `stop()` never aborts the claim in flight: the service may have leased calls to this
   * worker by the time the abort reached it, and an answer not read loses them (each an attempt, and a whole lease
   * before the call is offered again). So `stop()` ends the loop once that claim returns (within `wait_ms`; a
   * stalled one is given up `CLAIM_GRACE_MS` later), after the calls it brought are started.
   */
  private async claimLoop(signal: AbortSignal): Promise<void> {
    let failures = 0;
    while (!signal.aborted) {
      if (this.inFlight.size >= this.concurrency) {
        await Promise.race(this.inFlight);
        continue;
      }
      let tasks: ToolTask[];
      let date: number | null;
      try {
        const r = await this.request<{ tasks: ToolTask[] }>(
          'POST',
          '/v1/tool-tasks/claim',
          {
            tools: [...this.tools.keys()],
            // The service takes 1..MAX_CLAIM a claim; a larger concurrency is filled by the claims that follow.
            max: Math.min(MAX_CLAIM, this.concurrency - this.inFlight.size),
            wait_ms: this.waitMs,
            worker_id: this.workerId,
          },
          // Unanswered this long past its wait, the connection has stalled: given up (and claimed again), so that
          // neither the loop nor `stop()` waits on it for ever.
          AbortSignal.timeout(this.waitMs + CLAIM_GRACE_MS),
        );
        if (!Array.isArray(r.body.tasks)) {
          throw new ConnectionError(`POST /v1/tool-tasks/claim: an answer without a list of tasks`);
        }
        tasks = r.body.tasks;
        date = r.date;
      } catch (err) {
        if (signal.aborted) break;
        this.told(err, 'claim');
        // The service restarting, a network cut, a rate limit: claim again after a backoff (or its Retry-After).
        const wait = err instanceof HttpStatus ? err.retryAfterMs : undefined;
        await sleep(Math.max(wait ?? 0, backoff(failures++)), signal);
        continue;
      }
      // The calls an answer brought are leased to this worker: started before anything else can fail.
      for (const task of tasks) {
        const p: Promise<void> = this.runTask(task, leaseOf(task, date)).finally(() =>
          this.inFlight.delete(p),
        );
        this.inFlight.add(p);
      }
      if (failures > 0 && this.o.register !== false) {
        // Back after failed claims (a restart of the service): the tools are registered again.
        try {
          await this.registerAll(signal);
        } catch (err) {
          if (signal.aborted) break;
          this.told(err, 'register');
          await sleep(backoff(failures++), signal);
          continue;
        }
      }
      failures = 0;
      // A short `waitMs` (0: no long poll) must not make the claims a busy loop on the tenant's rate limit.
      if (tasks.length === 0 && this.waitMs < MIN_POLL_MS) await sleep(MIN_POLL_MS - this.waitMs, signal);
    }
  }

  /**
   * Runs one call and submits its result, heartbeating every third of its lease (`leaseMs`) all along, the submit
   * included. The call is over for this attempt — `lost` aborts, and the tool's signal with it — when a heartbeat is
   * refused 409 or 404 (the lease went to another attempt, the session was cancelled, the call completed), or once
   * the tool's `timeout_ms` has passed since the claim (the call was queued before: the service has timed it out).
   * Until then a result is sent again (no answer, 408, 429 after its Retry-After, 5xx) however long the service stays
   * away: a lapsed lease still takes a result until the service's sweep offers the call again, which no sweep does
   * while the service is down, and a result given up that would have counted gets the call run again.
   */
  private async runTask(task: ToolTask, leaseMs: number): Promise<void> {
    const lost = new AbortController();
    const every = Math.max(250, Math.floor(leaseMs / 3));
    const beat = setInterval(() => {
      this.call('POST', `/v1/tool-tasks/${task.id}/heartbeat`, undefined, AbortSignal.timeout(every)).catch(
        (err: unknown) => {
          // Lost, cancelled or completed: this attempt is over; the tool is told through its signal.
          if (err instanceof HttpStatus && (err.status === 409 || err.status === 404)) lost.abort();
        },
      );
    }, every);
    const deadline = setTimeout(() => lost.abort(), this.timeouts.get(task.name) ?? MAX_TOOL_TIMEOUT_MS);
    const over = () => {
      clearInterval(beat);
      clearTimeout(deadline);
    };
    // Nothing is held for a call that is over (a tool that ignores its signal runs on without heartbeats).
    lost.signal.addEventListener('abort', over, { once: true });
    try {
      const result = await this.outlived(task, this.execute(task, lost.signal), lost.signal);
      if (result && !lost.signal.aborted) await this.submit(task, result, lost.signal, every);
    } finally {
      over();
      lost.signal.removeEventListener('abort', over);
    }
  }

  /**
   * The tool's result, or null when its call has been over (`lost`) for `abortGraceMs` and the tool has not ended:
   * its slot is freed then (what it returns later is dropped), so that a tool that ignores its signal holds neither a
   * slot nor `stop()` for ever.
   */
  private async outlived(task: ToolTask, run: Promise<Result>, lost: AbortSignal): Promise<Result | null> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let arm = () => {};
    const abandoned = new Promise<null>((resolve) => {
      arm = () => void (timer = setTimeout(() => resolve(null), this.abortGraceMs));
    });
    if (lost.aborted) arm();
    else lost.addEventListener('abort', arm, { once: true });
    try {
      const result = await Promise.race([run, abandoned]);
      if (result === null) {
        this.told(
          new Error(
            `${task.name} (task ${task.id}) ran on ${this.abortGraceMs} ms after its call was over and its signal ` +
              'aborted: its slot is freed and its result will be discarded',
          ),
          'tool',
        );
      }
      return result;
    } finally {
      clearTimeout(timer);
      lost.removeEventListener('abort', arm);
    }
  }

  private async submit(task: ToolTask, first: Result, lost: AbortSignal, timeoutMs: number): Promise<void> {
    let result = first;
    let replaced = false;
    for (let attempt = 0; ; attempt++) {
      try {
        await this.call(
          'POST',
          `/v1/tool-tasks/${task.id}/result`,
          result,
          AbortSignal.timeout(timeoutMs * 3),
        );
        return;
      } catch (err) {
        if (!transient(err) && err instanceof HttpStatus) {
          // 409, 404: the service takes no result for this task (lease lost, cancelled, completed): nothing to send.
          if (err.status === 409 || err.status === 404 || replaced) return;
          // Any other 4xx refuses this result itself (too large, blocks the Messages API would refuse, a lone
          // surrogate): the call is answered with an error saying so, once — left unanswered, its lease would lapse
          // and the tool run again on every attempt.
          this.told(err, 'result');
          replaced = true;
          result = {
            content: `Error: the service refused the tool's result (HTTP ${err.status} ${err.code}).`,
            is_error: true,
          };
          continue;
        }
        this.told(err, 'result');
        // Sent again until the service answers, not only while heartbeats hold the lease (see runTask); the call over
        // (a heartbeat refused, the tool's timeout passed) ends it.
        const wait = Math.max(err instanceof HttpStatus ? (err.retryAfterMs ?? 0) : 0, backoff(attempt));
        await sleep(wait, lost);
        if (lost.aborted) return;
      }
    }
  }

  /** As the SDK's runner runs a tool: parse, run, and errors as `is_error` results. */
  private async execute(task: ToolTask, signal: AbortSignal): Promise<Result> {
    const tool = this.tools.get(task.name);
    if (!tool) return { content: `Error: Tool '${task.name}' not found`, is_error: true };
    const toolUse = { type: 'tool_use', id: task.tool_use_id, name: task.name, input: task.input };
    try {
      const input = tool.parse ? tool.parse(task.input) : task.input;
      const run = tool.run as (input: unknown, context: unknown) => unknown;
      // The SDK's run context, plus the task (its attempt and idempotency key) for tools that want them.
      const context = { toolUse, toolUseBlock: toolUse, signal, task };
      const content = await run(input, context);
      // The SDK's runner answers a tool that returns nothing with a `tool_result` without content, which the API
      // takes as an empty result; the service's result needs content, and its own runner stores such a block's
      // content as '' (src/engine/turns.ts): so '' here. Anything else goes as it is: a number or an object, which
      // the Messages API refuses in the SDK's request too, is refused by the service and answered with an error
      // (submit()).
      return { content: (content ?? '') as ResultContent, is_error: false };
    } catch (e) {
      return { content: thrownContent(e), is_error: true };
    }
  }

  /**
   * Stops claiming: a start under way ends (its registration request aborted; it resolves without claiming), the
   * claim in flight returns (within `waitMs`; not aborted, see `claimLoop`), the calls in flight and those it brought
   * run and submit their results, then it resolves. A call ends sooner when the service takes no result for it (409,
   * 404), and at the latest its tool's `timeout_ms` after its claim: its tool's signal aborts then, and a tool that
   * ignores it is left `abortGraceMs` later (see runTask). So whatever the tools or the service do, `stop()` resolves
   * within `waitMs` + 15 s, or the longest `timeout_ms` of the calls in flight + `abortGraceMs` (+ one request's
   * timeout), whichever is later. A second `stop()` meanwhile shares it.
   */
  stop(): Promise<void> {
    if (this.halting) return this.halting;
    const run = this.run;
    if (!run) return Promise.resolve();
    run.stopping.abort();
    this.halting = (async () => {
      // A refused registration rejects its start(), not this stop.
      await run.started.catch(() => undefined);
      await run.loop;
      await Promise.allSettled([...this.inFlight]);
    })().finally(() => {
      this.run = null;
      this.halting = null;
    });
    return this.halting;
  }
}
