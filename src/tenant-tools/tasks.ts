/**
 * The durable per-tenant queue of tool tasks (spec §7.1): a call of a tenant tool waits here for a worker (or the
 * service's HTTP caller), is offered to one claimant at a time under a lease, offered again with the next attempt
 * when the lease expires, failed after `max_attempts` or `timeout_ms`, and its result waits in an outbox until it is
 * delivered to its session (src/tenant-tools/service.ts). Keys in keys.ts; each method one script or command unless
 * its JSDoc says otherwise.
 *
 * Every time the queue stores or compares (leases, ready, deadline, done and gc times, `tt:due`) is of Redis's clock,
 * taken by the scripts (src/store/lua/includes/now.lua): the replicas pass durations and get the times back, so a replica
 * whose clock is off neither takes live leases for lapsed nor renews them into the future.
 *
 * Over 400 lines: every operation on a tenant's queue keys is one method here, which keeps them behind one door.
 */
import { randomBytes } from 'node:crypto';
import { decodeStored } from '../store/decode.js';
import { channelName } from '../store/keys.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import {
  HTTP_TENANTS_KEY,
  TASKS_DUE_KEY,
  stopChannel,
  taskKeys,
  toolsKey,
  wakeChannel,
  workersKey,
} from './keys.js';
import type { TenantToolRunner } from './types.js';
import {
  HTTP_QUEUE,
  taskCallId,
  type OfferRefusal,
  type TaskRecord,
  type TaskResult,
} from './task-record.js';
import './lua/commands.js';

/**
 * Filled by a refused heartbeat or result (`TaskQueue.heartbeat`, `complete`): with `completed`, the call's
 * record as the refusing script read it (heartbeat-3.lua, complete-7.lua), so whether it timed out (`timed_out_at`)
 * is of the same moment as the refusal, never of a later read that finds the record gone.
 */
export interface RefusedOffer {
  completed?: TaskRecord;
}

/** A script's refusal (`[refusal]`, `['completed', record]`), the record kept in `refused`. */
function refusalOf(r: string[], refused: RefusedOffer | undefined): OfferRefusal {
  if (r[0] === 'completed' && r[1] !== undefined && refused)
    refused.completed = decodeStored<TaskRecord>(r[1]);
  return r[0] as OfferRefusal;
}

/** How long a delivered call's record stays to keep a second run of its step from queueing it again. */
const TOMBSTONE_MS = 86_400_000;
/**
 * How long a sweeper holds the tenants it took from `tt:due` (ms): other replicas take others meanwhile; should it
 * die mid-sweep, its tenants are due again after this.
 */
const SWEEP_HOLD_MS = 15_000;
/** A worker last seen longer ago than this (ms) is forgotten (`GET /v1/tools` then says `last_seen_at: null`). */
const WORKERS_KEEP_MS = 86_400_000;
/** Most (tool, worker) pairs kept per tenant (the newest). */
const WORKERS_MAX = 1000;

export type EnqueueOutcome = 'queued' | 'known' | 'settled' | 'full';

export interface NewTask {
  session: string;
  toolUseId: string;
  round: number;
  name: string;
  input: unknown;
  runner: TenantToolRunner['type'];
  maxAttempts: number;
  timeoutMs: number;
}

const keyList = (tenant: string) => taskKeys(tenant);

/**
 * A call a claim offered: its record, its input, and the records of its earlier attempts whose `tool_task.retried`
 * is still owed (their sweeper died before writing it), to be written before this attempt's `tool.started`.
 */
export interface ClaimedCall {
  rec: TaskRecord;
  input: unknown;
  owed: TaskRecord[];
}

/**
 * Filled by a claim (`TaskQueue.claim`): `more` says the claim's byte bound (TOOL_TASK_CLAIM_MAX_BYTES) stopped it
 * before `max` calls with a due call of its queues left, which the next claim takes.
 */
export interface ClaimLeft {
  more?: boolean;
}

/** Most bytes of one claim's answer by default (TOOL_TASK_CLAIM_MAX_BYTES): records, inputs and owed records. */
export const CLAIM_MAX_BYTES = 4 * 1024 * 1024;

export class TaskQueue {
  constructor(
    private readonly redis: RedisClient,
    readonly leaseMs: number,
    /** Most calls of one tenant queued, leased or undelivered at once (TOOL_TASKS_MAX_PER_TENANT). */
    readonly maxPerTenant: number,
    /**
     * Most bytes one claim's script answers (TOOL_TASK_CLAIM_MAX_BYTES): its inputs, records and owed records; a
     * claim always takes its first call, whatever its size (claim-6.lua).
     */
    readonly claimMaxBytes = CLAIM_MAX_BYTES,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'tt');
  }

  /**
   * Queues calls of the tenant (a tool step's), each unless it was queued before, in one script: per call, in order,
   * 'queued', 'known' (still out), 'settled' (queued before, and its record says it was delivered or cancelled since:
   * that round of the call is over, and is not queued again), or 'full' (the tenant's bound). One script, so a claim
   * woken by the first call queued finds the others too (enqueue-7.lua publishes once all are written).
   */
  async enqueueAll(tenant: string, tasks: readonly NewTask[]): Promise<EnqueueOutcome[]> {
    if (tasks.length === 0) return [];
    const k = keyList(tenant);
    const args: string[] = [];
    for (const t of tasks) {
      const call = taskCallId(t.session, t.toolUseId, t.round);
      const rec: TaskRecord = {
        call,
        tenant,
        session: t.session,
        tool_use_id: t.toolUseId,
        name: t.name,
        runner: t.runner,
        queue: t.runner === 'http' ? HTTP_QUEUE : t.name,
        attempt: 0,
        max_attempts: t.maxAttempts,
        timeout_ms: t.timeoutMs,
        // Set by the script, of Redis's clock: queued now, deadline now + timeout_ms.
        deadline: 0,
        queued_at: 0,
        state: 'queued',
        offer: '',
        offers: '',
        worker: '',
        lease: 0,
      };
      args.push(call, JSON.stringify(rec), JSON.stringify(t.input ?? {}), rec.queue);
    }
    // `tt:due` and `tt:http` are global keys (another slot in a Cluster), written in commands of their own around the
    // script: before it, so a process dying between the two leaves the tenant due (and its http calls polled); after
    // it, as a sweeper or HTTP caller may take the tenant off between the first write and the script (see
    // `reschedule` and `httpIdle`: each asks the queue again after taking it off).
    const http = tasks.some((t) => t.runner === 'http');
    const dueIn = Math.min(...tasks.map((t) => t.timeoutMs));
    await this.schedule(tenant, dueIn);
    if (http) await this.redis.sadd(HTTP_TENANTS_KEY, tenant);
    const r = await this.redis.ttEnqueue(
      k.calls,
      k.inputs,
      k.ready,
      k.deadline,
      k.leased,
      k.done,
      k.bytes,
      this.maxPerTenant,
      channelName(this.redis, wakeChannel(tenant)),
      ...args,
    );
    if (r.includes(1)) await this.schedule(tenant, dueIn);
    if (http && tasks.some((t, i) => t.runner === 'http' && r[i] === 1))
      await this.redis.sadd(HTTP_TENANTS_KEY, tenant);
    return r.map((x) => (x === 1 ? 'queued' : x === 0 ? 'known' : x === 2 ? 'settled' : 'full'));
  }

  /** One call (`enqueueAll`). */
  async enqueue(tenant: string, t: NewTask): Promise<EnqueueOutcome> {
    const [r] = await this.enqueueAll(tenant, [t]);
    return r!;
  }

  /**
   * Offers up to `max` queued calls of `tools` to `worker`, as many as fit in `claimMaxBytes` (at least one); records
   * the worker as seen (one script, two ZADDs). `left.more` says the byte bound left due calls behind.
   */
  async claim(
    tenant: string,
    tools: readonly string[],
    max: number,
    worker: string,
    left?: ClaimLeft,
  ): Promise<ClaimedCall[]> {
    const k = keyList(tenant);
    const prefix = `tt_${randomBytes(9).toString('base64url').replace(/[-_]/g, 'x')}`;
    // The tenant is due when the leases this claim may give lapse, written before the claim (one pipeline): should
    // the process die after the claim, or `seen` fail, the lapsed leases are still swept then, not at the calls'
    // deadlines (which would also skip their remaining attempts). A claim that takes nothing costs one early look.
    const [, [more, ...rows]] = await Promise.all([
      this.schedule(tenant, this.leaseMs),
      this.redis.ttClaim(
        k.calls,
        k.inputs,
        k.ready,
        k.leased,
        k.offers,
        k.owed,
        this.leaseMs,
        max,
        worker,
        prefix,
        this.claimMaxBytes,
        ...tools,
      ),
      this.seen(tenant, tools, worker),
    ]);
    if (left) left.more = more === 1;
    const out: ClaimedCall[] = [];
    for (let i = 0; i + 2 < rows.length; i += 3) {
      out.push({
        rec: decodeStored<TaskRecord>(rows[i]!),
        input: decodeStored<unknown>(rows[i + 1]!),
        owed: decodeStored<TaskRecord[]>(rows[i + 2]!),
      });
    }
    return out;
  }

  /**
   * Workers seen now (or `agoMs` ago) for `tools`: only the names of the tenant's tools are kept, for
   * WORKERS_KEEP_MS, at most WORKERS_MAX pairs (one script; Redis's clock).
   */
  async seen(tenant: string, tools: readonly string[], worker: string, agoMs = 0): Promise<void> {
    tools = tools.filter((t) => t !== HTTP_QUEUE);
    if (tools.length === 0) return;
    await this.redis.ttSeen(
      toolsKey(tenant),
      workersKey(tenant),
      worker,
      agoMs,
      WORKERS_KEEP_MS,
      WORKERS_MAX,
      ...tools,
    );
  }

  /** Workers seen for each tool within the last two leases (of Redis's clock), and when one was last seen. */
  async workers(tenant: string): Promise<Map<string, { active: number; last_seen_at: string | null }>> {
    const [now, ...rows] = await this.redis.ttWorkers(workersKey(tenant));
    const out = new Map<string, { active: number; last_seen_at: string | null }>();
    const since = Number(now) - 2 * this.leaseMs;
    for (let i = 0; i + 1 < rows.length; i += 2) {
      const tool = String(rows[i]).split(' ')[0]!;
      const at = Number(rows[i + 1]);
      const w = out.get(tool) ?? { active: 0, last_seen_at: null };
      if (at >= since) w.active++;
      if (w.last_seen_at === null || at > Date.parse(w.last_seen_at))
        w.last_seen_at = new Date(at).toISOString();
      out.set(tool, w);
    }
    return out;
  }

  /**
   * Renews an offer's lease while the offer holds its call, past its expiry too until the sweep offers the call
   * again (heartbeat-3.lua): the record as renewed, or the refusal (`refused`: see `RefusedOffer`).
   */
  async heartbeat(tenant: string, offer: string, refused?: RefusedOffer): Promise<TaskRecord | OfferRefusal> {
    const k = keyList(tenant);
    const r = await this.redis.ttHeartbeat(k.offers, k.calls, k.leased, offer, this.leaseMs);
    if (r[0] !== 'ok') return refusalOf(r, refused);
    return decodeStored<TaskRecord>(r[1]!);
  }

  /** Takes an offer's result (it waits in the outbox until delivered); `refused`: see `RefusedOffer`. */
  async complete(
    tenant: string,
    offer: string,
    result: string,
    refused?: RefusedOffer,
  ): Promise<TaskRecord | OfferRefusal> {
    const k = keyList(tenant);
    const r = await this.redis.ttComplete(
      k.offers,
      k.calls,
      k.leased,
      k.deadline,
      k.results,
      k.done,
      k.bytes,
      offer,
      result,
    );
    if (r[0] !== 'ok') return refusalOf(r, refused);
    // Should this process die before delivering it, a sweep delivers it shortly.
    await this.schedule(tenant, 2000);
    return decodeStored<TaskRecord>(r[1]!);
  }

  /**
   * Gives an offer's call back after a failed try of the HTTP caller (its only user), `failure` saying how it failed:
   * offered again after `delayMs` (the tenant kept in `tt:http`, before the script and after it, as `enqueue` does),
   * owing its session a `tool_task.retried` event (`owed`: the debt's record, for the caller to pay at once; a
   * sweep or the call's next claim pays it should the caller die first), or failed with `error` when it had its last
   * attempt.
   */
  async release(
    tenant: string,
    offer: string,
    delayMs: number,
    error: string,
    failure: string,
  ): Promise<{ kind: 'retried'; owed: TaskRecord } | { kind: 'failed' | OfferRefusal }> {
    const k = keyList(tenant);
    await this.redis.sadd(HTTP_TENANTS_KEY, tenant);
    const r = await this.redis.ttRelease(
      k.offers,
      k.calls,
      k.leased,
      k.ready,
      k.deadline,
      k.results,
      k.done,
      k.owed,
      k.bytes,
      offer,
      delayMs,
      error,
      failure,
    );
    if (r[0] === 'failed') await this.schedule(tenant, 2000);
    if (r[0] === 'retried') {
      await this.redis.sadd(HTTP_TENANTS_KEY, tenant);
      // Due soon while the event is owed (includes/next-due.lua: a debt is due at once): a sweep pays it should the
      // caller not.
      await this.schedule(tenant, 2000);
      return { kind: 'retried', owed: decodeStored<TaskRecord>(r[1]!) };
    }
    return { kind: r[0] as 'failed' | OfferRefusal };
  }

  /** Tenants that may have calls of http tools queued. */
  httpTenants(): Promise<string[]> {
    return this.redis.smembers(HTTP_TENANTS_KEY);
  }

  /**
   * Takes the tenant off `tt:http` when it has no call of an http tool queued (due or waiting out a backoff); true
   * when it did. The queue is asked again after the SREM: a call queued meanwhile was queued by a script that ran
   * before that second look (which sees it, and puts the tenant back), or whose SADD comes after the SREM. A leased
   * call needs no entry: its try ends in `release` (which adds the tenant) or its lease lapses and the sweep offers
   * it again (adding the tenant too).
   */
  async httpIdle(tenant: string): Promise<boolean> {
    const { ready } = keyList(tenant);
    if ((await this.redis.ttHttpLeft(ready)) === 1) return false;
    await this.redis.srem(HTTP_TENANTS_KEY, tenant);
    if ((await this.redis.ttHttpLeft(ready)) === 0) return true;
    await this.redis.sadd(HTTP_TENANTS_KEY, tenant);
    return false;
  }

  /**
   * The call is over for the queue: delivered, or its session no longer waits for it. An http call cancelled while
   * leased is published on the tenant's stop channel (its try is aborted where it runs: http-stops.ts).
   */
  async settle(tenant: string, call: string, state: 'delivered' | 'cancelled'): Promise<void> {
    await this.settleIf(tenant, call, state, '');
  }

  /**
   * Cancels `rec`'s call, found not awaited by a read of its session made after `rec` was read, unless a run queued
   * the call again since `rec` was read (its `wanted` moved, enqueue-7.lua): that run's session waits for the call
   * (it was written so after the read), and its run parks on the task, which must stay out. Without this, a session
   * resumed between the read and the cancel (or answered, or sent a message) parked for good on a task cancelled
   * under it. False when refused: the caller takes the call as awaited. One script, as `settle`.
   */
  async cancelUnlessWanted(rec: TaskRecord): Promise<boolean> {
    return (await this.settleIf(rec.tenant, rec.call, 'cancelled', String(rec.wanted ?? 0))) !== 2;
  }

  private async settleIf(
    tenant: string,
    call: string,
    state: 'delivered' | 'cancelled',
    wanted: string,
  ): Promise<number> {
    const k = keyList(tenant);
    return this.redis.ttSettle(
      k.calls,
      k.inputs,
      k.results,
      k.ready,
      k.leased,
      k.deadline,
      k.done,
      k.gc,
      k.bytes,
      call,
      state,
      TOMBSTONE_MS,
      channelName(this.redis, stopChannel(tenant)),
      wanted,
    );
  }

  /** The record of the call an offer was made for, whichever offer holds it now (null when unknown). */
  async offerRecord(tenant: string, offer: string): Promise<TaskRecord | null> {
    const k = keyList(tenant);
    const call = await this.redis.hget(k.offers, offer);
    const rec = call ? await this.redis.hget(k.calls, call) : null;
    return rec ? decodeStored<TaskRecord>(rec) : null;
  }

  /** A call's record and its result (null until it has one). Two HGETs in one pipeline. */
  async record(tenant: string, call: string): Promise<{ rec: TaskRecord; result: TaskResult | null } | null> {
    const k = keyList(tenant);
    const [rec, result] = await Promise.all([
      this.redis.hget(k.calls, call),
      this.redis.hget(k.results, call),
    ]);
    if (!rec) return null;
    return { rec: decodeStored<TaskRecord>(rec), result: result ? decodeStored<TaskResult>(result) : null };
  }

  /**
   * Of `calls`, those whose result waits in the outbox (completed, not delivered yet), with their records: two HMGETs
   * in one pipeline. A call settled, unknown or without a result is left out.
   */
  async waiting(
    tenant: string,
    calls: readonly string[],
  ): Promise<Array<{ rec: TaskRecord; result: TaskResult }>> {
    if (calls.length === 0) return [];
    const k = keyList(tenant);
    const [recs, results] = await Promise.all([
      this.redis.hmget(k.calls, ...calls),
      this.redis.hmget(k.results, ...calls),
    ]);
    const out: Array<{ rec: TaskRecord; result: TaskResult }> = [];
    calls.forEach((_, i) => {
      const rec = recs[i];
      const result = results[i];
      if (!rec || !result) return;
      const r = decodeStored<TaskRecord>(rec);
      if (r.state === 'done') out.push({ rec: r, result: decodeStored<TaskResult>(result) });
    });
    return out;
  }

  /** Results completed before `before` (ms, Redis's clock: `sweep`'s `now`) and not delivered yet. */
  undelivered(tenant: string, before: number, limit = 100): Promise<string[]> {
    return this.redis.zrangebyscore(keyList(tenant).done, '-inf', before, 'LIMIT', 0, limit);
  }

  /**
   * One sweep of a tenant's queue; reschedules it, or takes it off `tt:due` when it has nothing left to watch. `now`
   * is the time the sweep compared with (Redis's clock).
   */
  async sweep(
    tenant: string,
    limit = 100,
  ): Promise<{
    changes: Array<{ kind: 'retried' | 'failed'; rec: TaskRecord }>;
    owed: TaskRecord[];
    idle: boolean;
    now: number;
  }> {
    const k = keyList(tenant);
    const [now, live, gc, ...rows] = await this.redis.ttSweep(
      k.calls,
      k.inputs,
      k.results,
      k.ready,
      k.leased,
      k.deadline,
      k.done,
      k.gc,
      k.offers,
      k.owed,
      k.bytes,
      limit,
      channelName(this.redis, wakeChannel(tenant)),
    );
    await this.reschedule(tenant, this.dueIn(Number(live), Number(gc), Number(now)));
    const out: Array<{ kind: 'retried' | 'failed'; rec: TaskRecord }> = [];
    const owed: TaskRecord[] = [];
    for (let i = 0; i + 1 < rows.length; i += 2) {
      const rec = decodeStored<TaskRecord>(String(rows[i + 1]));
      if (rows[i] === 'owed') owed.push(rec);
      else out.push({ kind: rows[i] === 'retried' ? 'retried' : 'failed', rec });
    }
    // An http call offered again after its claimant's lease lapsed (the claimant's replica died): the tenant may have
    // left `tt:http` while the call was leased.
    if (out.some((o) => o.kind === 'retried' && o.rec.queue === HTTP_QUEUE))
      await this.redis.sadd(HTTP_TENANTS_KEY, tenant);
    // Written in attempt order (HSCAN's is none): the session's script writes no attempt below one it wrote.
    owed.sort((x, y) => (x.call === y.call ? x.attempt - y.attempt : x.call < y.call ? -1 : 1));
    // Idle: no call queued, leased or undelivered (so no result to deliver either), no event owed.
    return { changes: out, owed, idle: Number(live) < 0, now: Number(now) };
  }

  /**
   * The `tool_task.retried` event of `rec`'s lost attempt (`rec` as offered again, sweep-11.lua) is written: its debt
   * goes. One HDEL, harmless when repeated: an attempt's debt is recorded once, by the sweep that lost its lease.
   */
  async paidRetried(rec: TaskRecord): Promise<void> {
    await this.redis.hdel(keyList(rec.tenant).owed, `${rec.call} ${rec.attempt}`);
  }

  /**
   * In how many ms a queue whose next lease expiry, deadline or undelivered result is `live` and next tombstone
   * `gc` (ms, -1: none; the clock of `now`, Redis's) needs a sweep: null when never (nothing to watch). A live entry
   * is looked at at least once a lease.
   */
  private dueIn(live: number, gc: number, now: number): number | null {
    if (live >= 0) return Math.min(Math.max(live - now, 250), this.leaseMs);
    if (gc >= 0) return Math.max(gc - now, 250);
    return null;
  }

  /**
   * Sets the tenant's next sweep to `inMs` from now (null: off `tt:due`). This may undo a schedule written since the sweep read
   * the queue (a call queued meanwhile), so the queue is asked again afterwards: whatever was written to it before
   * that second look is seen (and scheduled, never later than it is); whatever is written after it schedules itself
   * after this write.
   */
  private async reschedule(tenant: string, inMs: number | null): Promise<void> {
    await this.redis.ttDueSet(TASKS_DUE_KEY, tenant, inMs ?? '', '');
    const k = keyList(tenant);
    const [live, gc, now] = await this.redis.ttPending(k.leased, k.deadline, k.done, k.gc, k.owed);
    const again = this.dueIn(Number(live), Number(gc), Number(now));
    if (again !== null) await this.schedule(tenant, again);
  }

  /**
   * Takes up to `limit` tenants whose queue is due for a sweep, held SWEEP_HOLD_MS so the other replicas take
   * others (one script on `tt:due`, comparing in Redis's clock, the one due-set-1.lua stores).
   */
  claimDue(limit: number): Promise<string[]> {
    return this.redis.ttDueClaim(TASKS_DUE_KEY, limit, SWEEP_HOLD_MS);
  }

  /** The tenant's queue needs a sweep within `inMs` (never later than it was already due; one script). */
  private async schedule(tenant: string, inMs: number): Promise<void> {
    await this.redis.ttDueSet(TASKS_DUE_KEY, tenant, inMs, 'LT');
  }
}
