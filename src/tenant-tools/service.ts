/**
 * The tool tasks' operations (spec §7.1) behind `/v1/tool-tasks`: long-poll claims woken by the tenant's `wake`
 * channel (never by polling Redis), heartbeats, results, and their delivery to the session; and the sweep every
 * replica runs (lost leases offered again, timeouts failed, results left undelivered by a dead replica delivered).
 *
 * Delivery writes the call's `result:<id>` field of the session's pending step, with those of the step's other
 * calls whose results wait in the queue (a guarded read-check-write, like a client's result: `deliverOnce`), then,
 * when the session runs, marks the run due and kicks it (a session waiting for its client keeps the result on its
 * step: the client's answer starts the run); the call is settled in the queue only after that, so a replica dying
 * at any point leaves the result in the outbox for the sweep to deliver again (writing it is idempotent: a call
 * that has its result takes no other).
 *
 * Over 400 lines: which session awaits which task (`awaits`) is read by claims, heartbeats, results, delivery and
 * the sweep alike, and keeping them in one class keeps that one rule in one place.
 */
import { SweepLoop } from '../sweep-loop.js';
import type { FastifyBaseLogger } from 'fastify';
import {
  NotFound,
  QuotaExceeded,
  RevisionMismatch,
  conflict,
  notFound,
  type DomainError,
} from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import { mutate, startRun, type SessionDeps } from '../sessions/mutate.js';
import type { StoredBlock } from '../history.js';
import type { SessionState } from '../store/session-state.js';
import { fitResults, pendingFields, setResult, type PendingCall } from '../store/pending.js';
import type { RedisClient } from '../store/lua-commands.js';
import { WakeChannels, type Wake } from './wake.js';
import {
  claimWaitSeconds,
  claimedTask,
  taskCallId,
  taskRound,
  toolRetried,
  toolStarted,
  type ClaimedTask,
  type OfferRefusal,
  type TaskRecord,
  type TaskResult,
} from './task-record.js';
import type { ClaimLeft, RefusedOffer, TaskQueue } from './tasks.js';
import { FailureLog } from '../log.js';

interface ToolTaskOptions {
  queue: TaskQueue;
  deps: SessionDeps;
  /** The subscriber connection (the `wake` channels). */
  sub: RedisClient;
  metrics: Metrics;
  log: FastifyBaseLogger;
  /** Largest result accepted as it is (JSON bytes); a larger one becomes an `is_error` result naming the limit. */
  maxResultBytes: number;
  sweepIntervalMs?: number;
  /** TOOL_TASK_MAX_WAITING_CLAIMS: most long-poll claims of one tenant waiting at once on this process. */
  maxWaitingClaims: number;
}

/** Tenants one sweep script takes from `tt:due` (swept concurrently). */
const SWEEP_BATCH = 100;

/** The session no longer waits for the call (cancelled, deleted, answered otherwise). */
class NotAwaited extends Error {}
/** The call has its result already. */
class AlreadyDelivered extends Error {}

const refusal = (r: OfferRefusal, id: string): DomainError => {
  if (r === 'unknown') return notFound('task');
  if (r === 'lost')
    return conflict(
      'task_lease_lost',
      `The lease of task ${id} expired; the call is offered again under a new id.`,
    );
  if (r === 'cancelled')
    return conflict(
      'task_cancelled',
      `The session no longer waits for task ${id} (cancelled or deleted): stop working on it.`,
    );
  return conflict('task_already_completed', `Task ${id} already has its result.`);
};

/**
 * `task_already_completed` for `rec`, the call of the offer refused: its `details.reason` tells a worker whether the
 * call timed out (`timed_out`, with when and the tool's `timeout_ms`: the session got an `is_error` result instead of
 * the worker's) or a result was taken already (`result_taken`: this offer's own, sent again, or a heartbeat after it).
 */
const completedRefusal = (id: string, rec: TaskRecord | undefined): DomainError => {
  // Not reached: heartbeat-3.lua and complete-7.lua answer `completed` with the record they read.
  if (!rec) return conflict('task_already_completed', `Task ${id} is settled.`, { reason: 'unknown' });
  if (rec.timed_out_at === undefined)
    return conflict('task_already_completed', `Task ${id} already has its result.`, {
      reason: 'result_taken',
    });
  return conflict(
    'task_already_completed',
    `Task ${id} timed out: no result within the tool's timeout_ms (${rec.timeout_ms} ms), so the session got an error result instead.`,
    {
      reason: 'timed_out',
      timed_out_at: new Date(rec.timed_out_at).toISOString(),
      timeout_ms: rec.timeout_ms,
    },
  );
};

/** A result from the outbox as the step holds it (content that is neither text nor blocks, as JSON text). */
const resultOf = (result: TaskResult): { content: string | StoredBlock[]; is_error: boolean } => ({
  content:
    typeof result.content === 'string' || Array.isArray(result.content)
      ? (result.content as string | StoredBlock[])
      : JSON.stringify(result.content),
  is_error: result.is_error === true,
});

/**
 * The refusal of a lost offer (another offer held the call, or none: `rec.offer` empty) whose call is settled: no
 * attempt is offered again, so not `task_lease_lost` (whose meaning is that one is) but `task_already_completed`,
 * saying why. Timed out (`timed_out`, as completedRefusal says it); its last attempt's lease lapsed (sweep-11.lua
 * fails the call and empties `offer`: `attempts_exhausted`, the session got `Error: no worker answered: the lease of
 * each of its N attempts expired`); or a later attempt's result was taken (`result_taken`).
 */
const settledRefusal = (id: string, rec: TaskRecord): DomainError => {
  if (rec.timed_out_at !== undefined) return completedRefusal(id, rec);
  if (rec.offer === '')
    return conflict(
      'task_already_completed',
      `Task ${id} was the call's last attempt (max_attempts ${rec.max_attempts}) and its lease expired, so the session got an error result instead; the call is not offered again.`,
      { reason: 'attempts_exhausted', attempts: rec.attempt, max_attempts: rec.max_attempts },
    );
  return conflict(
    'task_already_completed',
    `Task ${id}'s lease expired and a later attempt's result was taken; the call is not offered again.`,
    { reason: 'result_taken' },
  );
};

/**
 * The session waits for the task's call: it is the task's tenant's, and its pending step holds the call unanswered,
 * in the task's round (a call resumed after a failure is a task of its own), while it runs (its run parked for the
 * task, or is about to) or waits for its client (the task was queued with the step's server tools:
 * src/engine/tool-step.ts). Not a reply under review (`pending.turn`): its calls have not been run, nor queued.
 */
export function awaits(s: SessionState, rec: TaskRecord): boolean {
  return openCall(s, rec) !== null;
}

/** The step's call of the task, if the session is in a state that waits on its calls' tasks (see `awaits`). */
function stepCall(s: SessionState, rec: TaskRecord): PendingCall | null {
  if (s.tenant !== rec.tenant || !s.pending) return null;
  const waits = s.status === 'running' || (s.status === 'requires_action' && !s.pending.turn);
  if (!waits) return null;
  const call = s.pending.calls.find((c) => c.id === rec.tool_use_id);
  if (!call || (call.round ?? 0) !== taskRound(rec.call)) return null;
  return call;
}

/** The call of the task while the session waits for its result (`awaits`). */
function openCall(s: SessionState, rec: TaskRecord): PendingCall | null {
  const call = stepCall(s, rec);
  // A call waiting for its decision is never queued (approval runs before a task is offered); a denied one is over.
  if (!call || call.result || call.approval === 'required' || call.approval === 'denied') return null;
  return call;
}

export class ToolTasks {
  private readonly wakes: WakeChannels;
  private readonly workersSeen = new Map<string, number>();
  private readonly sweeps: SweepLoop;
  /** Set by `closeClaims`: the service is closing, no claim waits any more. */
  private closing = false;

  constructor(private readonly o: ToolTaskOptions) {
    this.wakes = new WakeChannels(o.sub);
    this.sweeps = new SweepLoop(
      () => this.sweep(),
      o.sweepIntervalMs ?? 500,
      new FailureLog(o.log, 'tool task sweep'),
    );
  }

  get queue(): TaskQueue {
    return this.o.queue;
  }

  /**
   * `POST /v1/tool-tasks/claim`: up to `max` calls of `tools`, as many as fit in TOOL_TASK_CLAIM_MAX_BYTES (at least
   * one: claim-6.lua), waiting up to `waitMs` for one. After a first empty
   * claim it listens on the tenant's `wake` channel and claims once more before it waits: a call queued between the
   * empty claim and the SUBSCRIBE was published to nobody, and is found by that claim. From then on `heard` is
   * cleared before each claim, so a call published while a claim runs makes the wait end at once. Each call queued
   * wakes one waiting claim of its tool per replica (wake.ts), and a claim that ends with a wake unanswered passes it
   * on. At most `maxWaitingClaims` of a tenant listen on this process: one more, having found nothing, is refused
   * (429 `quota_exceeded`, `waiting_claims`) rather than waiting, so one tenant's idle pollers cannot pile up.
   */
  async claim(
    tenant: string,
    body: { tools: string[]; max: number; wait_ms: number; worker_id: string },
    signal: AbortSignal,
  ): Promise<ClaimedTask[]> {
    const until = Date.now() + body.wait_ms;
    this.noteWorker(body.worker_id);
    let wake: Wake | null = null;
    let full = false;
    try {
      for (;;) {
        if (signal.aborted || this.stopping) return [];
        wake?.clear();
        const behind: ClaimLeft = {};
        const out = await this.claimOnce(tenant, body, behind);
        // Calls may be left when it took `max`, or when its byte bound (TOOL_TASK_CLAIM_MAX_BYTES) stopped it.
        full = out.length >= body.max || behind.more === true;
        const left = until - Date.now();
        if (out.length > 0 || left <= 0 || signal.aborted || this.stopping) return out;
        if (!wake) {
          const max = this.o.maxWaitingClaims;
          if (this.wakes.listening(tenant) >= max)
            throw new QuotaExceeded(
              'quota_exceeded',
              `More than ${max} long-poll claims of this tenant wait at once on this replica; claim again shortly.`,
              { quota: 'waiting_claims', limit: max, retry_after_s: 1 },
              { retryAfterS: 1 },
            );
          wake = await this.wakes.listen(tenant, body.tools);
        } else await wake.wait(left, signal);
      }
    } finally {
      if (wake) await this.wakes.unlisten(wake, full);
    }
  }

  private get stopping(): boolean {
    return this.closing || this.sweeps.stopping;
  }

  /**
   * The service is closing (its server's `preClose`, before it closes the connections): every claim waiting answers
   * at once, with no task (`claim` returns `[]` when it wakes, claiming nothing more), and a claim that comes later
   * does not wait. A claim whose script runs meanwhile answers what it took.
   */
  closeClaims(): void {
    this.closing = true;
    this.wakes.wakeAll();
  }

  /**
   * One claim: the calls offered whose session still waits for them (the others are cancelled; one queued again by a
   * run meanwhile is given out all the same: `cancelled`).
   */
  private async claimOnce(
    tenant: string,
    body: { tools: string[]; max: number; worker_id: string },
    left: ClaimLeft,
  ): Promise<ClaimedTask[]> {
    const got = await this.o.queue.claim(tenant, body.tools, body.max, body.worker_id, left);
    const out: ClaimedTask[] = [];
    const started: Array<Promise<void>> = [];
    for (const { rec, input, owed } of got) {
      if ((await this.stillAwaited(rec)) || !(await this.cancelled(rec))) {
        out.push(claimedTask(rec, input, this.o.queue.leaseMs));
        this.o.metrics.toolTasks.inc({ event: 'claimed' });
        this.o.metrics.toolTaskClaimLatency.observe(claimWaitSeconds(rec, this.o.queue.leaseMs));
        started.push(this.logStarted(rec, input, rec.worker, owed));
      }
    }
    // Before the worker has its tasks: each `tool.started` is in its session's log ahead of the result the worker
    // will send, and a process that dies before this answer gave no task out unlogged (its leases lapse and the
    // calls are offered again, `tool_task.retried`).
    await Promise.all(started);
    return out;
  }

  /**
   * The `tool.started` of an attempt given out, after the `tool_task.retried` events its claim found still owed (a
   * sweeper died before writing them: `owed`, from the claim), so a follower never sees an attempt without the
   * retry before it. A log that cannot be written does not take the task back (an owed event is then left to the
   * sweep).
   */
  async logStarted(
    rec: TaskRecord,
    input: unknown,
    worker = rec.worker,
    owed: readonly TaskRecord[] = [],
  ): Promise<void> {
    for (const lost of owed) await this.payRetried(lost);
    await this.o.deps.store.appendEvents(rec.session, [toolStarted(rec, input, worker)]).then(
      () => {},
      (err: unknown) =>
        this.o.log.warn({ err, session: rec.session, tool: rec.name }, 'tool.started not logged'),
    );
  }

  /**
   * Writes the owed `tool_task.retried` of `rec`'s lost or failed attempt (`rec` as offered again), then clears the
   * debt. The sweep that lost the lease, or the HTTP caller that gave back a failed try, records the debt in the
   * tenant's slot with the offer (sweep-11.lua, release-9.lua); the event is in the session's slot, so the two
   * cannot be one write: a writer killed between them leaves the debt to the call's next claim or the next sweep,
   * and two replicas may pay it at once. The session's script writes it once per attempt all the same
   * (tool-retried-2.lua), so paying again is harmless; the debt is cleared only after the write, so it is never
   * lost. A failed write leaves it to the next sweep (the tenant stays due meanwhile).
   */
  async payRetried(rec: TaskRecord): Promise<void> {
    try {
      await this.o.deps.store.appendToolRetried(
        rec.session,
        { toolUseId: rec.tool_use_id, round: taskRound(rec.call), attempt: rec.attempt },
        toolRetried(rec),
      );
      await this.o.queue.paidRetried(rec);
    } catch (err) {
      this.o.log.warn({ err, session: rec.session, tool: rec.name }, 'tool_task.retried not logged');
    }
  }

  /**
   * The refusal of an offer. `lost` says the call is offered again under a new id; when its session no longer waits
   * for it (cancelled after the sweep offered it again), the worker is told `task_cancelled` instead, and the call is
   * settled; when the call is settled already (failed after its last attempt, timed out, or answered by a later
   * attempt), nothing is offered again: `task_already_completed` (settledRefusal). `completed` says whether the call
   * timed out or had a result (completedRefusal), from the record the refusing script read (`refused`). One read
   * more, for `lost` only.
   */
  private async refuse(
    tenant: string,
    id: string,
    r: OfferRefusal,
    refused?: RefusedOffer,
  ): Promise<DomainError> {
    if (r === 'completed') return completedRefusal(id, refused?.completed);
    if (r !== 'lost') return refusal(r, id);
    const rec = await this.o.queue.offerRecord(tenant, id);
    if (rec?.state === 'done' || rec?.state === 'delivered') return settledRefusal(id, rec);
    if (rec?.state === 'cancelled') return refusal('cancelled', id);
    const open = rec?.state === 'queued' || rec?.state === 'leased';
    if (!rec || !open || (await this.stillAwaited(rec)) || !(await this.cancelled(rec)))
      return refusal(r, id);
    return refusal('cancelled', id);
  }

  /** Whether the call's session still waits for it (see `awaits`). */
  private async stillAwaited(rec: TaskRecord): Promise<boolean> {
    const s = await this.o.deps.store.load(rec.session);
    return s !== null && awaits(s, rec);
  }

  /**
   * Settles `rec`'s call as cancelled, its session read (after `rec`) not awaiting it, unless a run queued it again
   * since `rec` was read (TaskQueue `cancelUnlessWanted`): a session resumed (answered, sent a message) between that
   * read and this settle has its run parked on the task, which then stays out, and the caller takes the call as
   * awaited. False then. Every "not awaited" cancel of this file goes through here.
   */
  private async cancelled(rec: TaskRecord): Promise<boolean> {
    if (!(await this.o.queue.cancelUnlessWanted(rec))) return false;
    this.o.metrics.toolTasks.inc({ event: 'cancelled' });
    return true;
  }

  private noteWorker(id: string): void {
    const now = Date.now();
    this.workersSeen.set(id, now);
    const since = now - this.o.queue.leaseMs;
    for (const [w, at] of this.workersSeen) if (at < since) this.workersSeen.delete(w);
    this.o.metrics.toolWorkersActive.set(this.workersSeen.size);
  }

  /**
   * The `Date` an answer carrying a `lease_expires_at` is sent with (an HTTP date): the Redis time the lease was taken
   * or renewed at (its expiry less the lease, both of Redis's clock: claim-6.lua, heartbeat-3.lua), not this
   * replica's. A worker works out the lease's length as the difference of the two (packages/client ToolWorker
   * `leaseOf`): of one clock, it is the lease whatever this replica's clock says.
   */
  leaseDate(leaseExpiresAt: string): string {
    return new Date(Date.parse(leaseExpiresAt) - this.o.queue.leaseMs).toUTCString();
  }

  /** `POST /v1/tool-tasks/:id/heartbeat`. */
  async heartbeat(tenant: string, id: string): Promise<{ lease_expires_at: string; lease_ms: number }> {
    // Renewed while this offer holds the call, even past the lease's expiry until the sweep offers the call again,
    // as a result is taken then (heartbeat-3.lua): `task_lease_lost` only once the call went to another attempt.
    const refused: RefusedOffer = {};
    const rec = await this.o.queue.heartbeat(tenant, id, refused);
    if (typeof rec === 'string') throw await this.refuse(tenant, id, rec, refused);
    this.noteWorker(rec.worker);
    // A session that no longer waits for the call: the worker is to stop, and the call will not be offered again.
    if (!(await this.stillAwaited(rec)) && (await this.cancelled(rec))) throw refusal('cancelled', id);
    await this.o.queue.seen(tenant, [rec.name], rec.worker);
    return { lease_expires_at: new Date(rec.lease).toISOString(), lease_ms: this.o.queue.leaseMs };
  }

  /** `POST /v1/tool-tasks/:id/result`. */
  async submit(
    tenant: string,
    id: string,
    result: { content: string | StoredBlock[]; is_error?: boolean | undefined },
  ): Promise<void> {
    const r: TaskResult = { content: result.content, is_error: result.is_error ?? false };
    let text = JSON.stringify(r);
    const bytes = Buffer.byteLength(text);
    if (bytes > this.o.maxResultBytes) {
      text = JSON.stringify({
        content: `Error: the tool's result is ${bytes} bytes, more than TOOL_RESULT_MAX_BYTES (${this.o.maxResultBytes})`,
        is_error: true,
      });
    }
    const refused: RefusedOffer = {};
    const rec = await this.o.queue.complete(tenant, id, text, refused);
    if (typeof rec === 'string') throw await this.refuse(tenant, id, rec, refused);
    this.o.metrics.toolTasks.inc({ event: 'completed' });
    const outcome = await this.deliver(tenant, rec.call);
    if (outcome === 'cancelled') throw refusal('cancelled', id);
  }

  /**
   * Delivers a completed call's result to its session, then settles it. A call found not awaited is cancelled,
   * unless a run queued it again since its record was read (`cancelled`): the session waits for it after all, and
   * the delivery is made again from a new read (a few times at most; then the sweep's, which delivers results left).
   *
   * `deferred`: the session kept changing under the guarded write until `mutate` gave up (many results of one
   * session delivered at once, with its run writing too). The result is committed in the outbox all the same, and
   * the tenant's sweep is due within 2 s of its `complete` (tasks.ts): the sweep delivers it then, unless a delivery
   * of another call of the session takes it first (`deliverOnce` writes every result of the step waiting). So a
   * worker's result, once taken, is answered 200 whatever the contention (spec §7.1 declares no 412 there).
   */
  async deliver(tenant: string, call: string): Promise<'delivered' | 'cancelled' | 'gone' | 'deferred'> {
    try {
      for (let i = 0; i < 3; i++) {
        const got = await this.deliverOnce(tenant, call);
        if (got !== 'wanted') return got;
      }
    } catch (err) {
      if (!(err instanceof RevisionMismatch)) throw err;
      this.o.log.info(
        { tenant, call },
        'tool task delivery deferred to the sweep: its session kept changing',
      );
      return 'deferred';
    }
    return 'gone';
  }

  /**
   * One delivery, from one read of the call's record. The session's write takes every result of the step that waits
   * in the outbox, not only this call's: deliveries of one session's calls at once (a worker answering a step's
   * calls together) race for one revision, and each write a loser retries against has delivered the loser's result
   * too when it was committed before that write's read (the loser finds it on the step: `AlreadyDelivered`, settles
   * it and kicks the run). So contention ends within a round or two of the guarded write, whatever the number of
   * results, and across replicas alike (the outbox is in Redis). Each result is written once: the write is guarded
   * by the revision, and a call that has its result takes no other (`openCall`). A replica dying after the write
   * leaves the calls in the outbox: the sweep's delivery finds them delivered, kicks the run and settles them.
   */
  private async deliverOnce(
    tenant: string,
    call: string,
  ): Promise<'delivered' | 'cancelled' | 'gone' | 'wanted'> {
    const got = await this.o.queue.record(tenant, call);
    if (!got || !got.result) return 'gone';
    const { rec, result } = got;
    // Whether the session runs as this delivery writes (read on each attempt of the guarded write): a running
    // session's run parked for its tasks and goes on once a result is in (or parks again). A session that waits for
    // its client keeps the result on its step and starts no run: the client's answer does, and finds it there. The
    // revision guards the write, so a client's answer landing first makes this attempt read `running`.
    let runs = false;
    // The calls the write that landed delivered (this one first): settled after it.
    let delivered: string[] = [];
    try {
      await mutate(this.o.deps, tenant, rec.session, undefined, async (s) => {
        runs = s.status === 'running';
        // A call that has its result takes no other: a second delivery (its first one's replica died before
        // settling it), or a delivery of another call of the step wrote it; the run is kicked again below.
        if (stepCall(s, rec)?.result) throw new AlreadyDelivered();
        if (!s.pending || !openCall(s, rec)) throw new NotAwaited();
        const step = structuredClone(s.pending);
        // The other results of the step waiting in the outbox, read after the session (each attempt reads anew):
        // one committed before this read is written here. Only calls the session awaits (their round's task).
        const others = step.calls
          .filter((c) => c.runner !== undefined && c.id !== rec.tool_use_id && !c.result)
          .map((c) => taskCallId(rec.session, c.id, c.round ?? 0));
        const waiting = [
          { rec, result },
          ...(await this.o.queue.waiting(tenant, others)).filter((w) => openCall(s, w.rec)),
        ];
        const set: Array<{ c: PendingCall; attempt: number }> = [];
        for (const w of waiting) {
          const c = step.calls.find((x) => x.id === w.rec.tool_use_id);
          // Not reached: `openCall` found each of them on the step read, of which `step` is a copy.
          if (!c) throw new NotAwaited();
          setResult(c, resultOf(w.result));
          c.reported = true;
          set.push({ c, attempt: w.rec.attempt });
        }
        // A result that would take the step's results past MAX_TURN_BYTES together becomes an error saying so: the
        // worker's result is taken (200), the call must end. Fitted on this read; the revision guards the write.
        fitResults(step.calls, new Set(set.map(({ c }) => c.id)), this.o.deps.store.maxTurnBytes);
        const events: Array<[string, string]> = [];
        for (const { c, attempt } of set) {
          // Set above (`setResult`), perhaps replaced by `fitResults`: the result as written.
          const sent = c.result;
          if (!sent) continue;
          events.push([
            'tool.completed',
            JSON.stringify({
              tool_use_id: c.id,
              name: c.name,
              input: c.input,
              content: sent.content,
              is_error: sent.is_error,
              duration_ms: null,
              attempt,
            }),
          ]);
        }
        delivered = waiting.map((w) => w.rec.call);
        // Not refused at TENANT_MAX_BYTES: the results are the workers', committed already; the calls must end.
        // Nor past MAX_TURN_BYTES: fitted above.
        return { ops: { hset: pendingFields(step), events }, storageCap: false, resultsCap: false };
      });
    } catch (err) {
      if (err instanceof AlreadyDelivered) return this.settleDelivered(tenant, rec, [call], runs);
      if (!(err instanceof NotAwaited || err instanceof NotFound)) throw err;
      return (await this.cancelled(rec)) ? 'cancelled' : 'wanted';
    }
    return this.settleDelivered(tenant, rec, delivered, runs);
  }

  /**
   * The calls are settled once their results are on the step; a running session's run is kicked first (a replica
   * dying between the two leaves the calls to the sweep, which delivers them again: `AlreadyDelivered`, kicked
   * again). Settling a call another delivery settled already changes nothing.
   */
  private async settleDelivered(
    tenant: string,
    rec: TaskRecord,
    calls: readonly string[],
    runs: boolean,
  ): Promise<'delivered'> {
    if (runs) await startRun(this.o.deps, rec.session);
    for (const call of calls) await this.o.queue.settle(tenant, call, 'delivered');
    return 'delivered';
  }

  /**
   * One sweep of every tenant queue that is due (any replica): batches of SWEEP_BATCH tenants, each batch taken by a
   * script that holds its tenants (tasks.ts `claimDue`), so replicas sweeping at once take different ones, until
   * none is due. A pass ends: a tenant swept is due again no sooner than 250 ms later, or leaves `tt:due` when its
   * queue has nothing left to watch, so past tenants cost nothing.
   */
  async sweep(): Promise<void> {
    for (;;) {
      if (this.sweeps.stopping) return;
      const tenants = await this.o.queue.claimDue(SWEEP_BATCH);
      await Promise.all(
        tenants.map((tenant) =>
          this.sweepTenant(tenant).catch((err) =>
            this.o.log.warn({ err, tenant }, 'tool task sweep of a tenant failed'),
          ),
        ),
      );
      if (tenants.length < SWEEP_BATCH) return;
    }
  }

  /** One tenant's sweep (the scripts make a double sweep harmless). */
  private async sweepTenant(tenant: string): Promise<void> {
    const { changes, owed, idle, now } = await this.o.queue.sweep(tenant);
    for (const { kind } of changes)
      this.o.metrics.toolTasks.inc({ event: kind === 'retried' ? 'retried' : 'timed_out' });
    // The calls this sweep offered again, and the debts a dead sweeper (or a failed write) left.
    for (const rec of owed) await this.payRetried(rec);
    if (idle) return;
    // Results completed a while ago and still here: their replica died before delivering them (or this sweep
    // failed them just now). `now` is the sweep's, of the clock the results' times are in (Redis's).
    for (const call of await this.o.queue.undelivered(tenant, now - 1000)) {
      await this.deliver(tenant, call).catch((err) =>
        this.o.log.warn({ err, tenant }, 'tool task delivery failed'),
      );
    }
  }

  start(): void {
    this.sweeps.start(this.o.sweepIntervalMs ?? 500);
  }

  async stop(): Promise<void> {
    this.wakes.close();
    await this.sweeps.stop();
  }
}
