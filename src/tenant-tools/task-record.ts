/**
 * A tool task as the queue (tasks.ts) keeps it and as the routes and the HTTP caller hand it out: its record, a
 * claim's view of it, its result, and the event of its start.
 */
import { eventOf } from '../events/schemas.js';
import type { TenantToolRunner } from './types.js';

export type TaskState = 'queued' | 'leased' | 'done' | 'delivered' | 'cancelled';

/** The queue's id of a session's call (a resumed call's each round is a task of its own). */
export const taskCallId = (session: string, toolUseId: string, round: number) =>
  `${session}:${toolUseId}#${round}`;

/** The round of a call (`taskCallId`'s last part). */
export const taskRound = (call: string) => Number(call.slice(call.lastIndexOf('#') + 1));

/** A call's record in the queue (JSON of scalars only: the scripts decode it). */
export interface TaskRecord {
  call: string;
  tenant: string;
  session: string;
  tool_use_id: string;
  name: string;
  runner: TenantToolRunner['type'];
  /** Where it waits: the tool's name (workers claim by it), or `~http` (the service's HTTP caller). */
  queue: string;
  attempt: number;
  max_attempts: number;
  timeout_ms: number;
  deadline: number;
  queued_at: number;
  state: TaskState;
  /** The offer holding the call now ('' when none), and every offer it had, space-separated. */
  offer: string;
  offers: string;
  worker: string;
  lease: number;
  /** When the sweep failed the call past its deadline (`timeout_ms`), Redis's clock; absent otherwise. */
  timed_out_at?: number;
  /**
   * How many times a run queued the call again while it was out (enqueue-7.lua answered `known`): a run that parks
   * on it. A cancel decided from a read of the session made before is refused (TaskQueue `cancelUnlessWanted`).
   */
  wanted?: number;
  /**
   * Bytes the call holds in its tenant's storage count (TENANT_MAX_BYTES): its input's copy and its result's, while
   * the queue keeps them; set and cleared by the scripts that write and delete those copies (held-bytes.lua). Absent:
   * none (settled, or queued before the count existed).
   */
  bytes?: number;
  /**
   * Only in an owed record (keys.ts `owed`) of an http tool's failed try, given back by its caller (release-9.lua):
   * the try's failure, which its `tool_task.retried` event tells. Never in the call's own record.
   */
  failure?: string;
}

/**
 * How long (s) a call just claimed waited in its queue, both times of Redis's clock (a claim leases it until its
 * claim time + `leaseMs`), whatever the replica's.
 */
export const claimWaitSeconds = (rec: TaskRecord, leaseMs: number) =>
  Math.max(0, rec.lease - leaseMs - rec.queued_at) / 1000;

/** A call as a claim answers it (spec §7.1). */
export interface ClaimedTask {
  id: string;
  session_id: string;
  tool_use_id: string;
  name: string;
  input: unknown;
  attempt: number;
  idempotency_key: string;
  lease_expires_at: string;
  /** The lease's length (ms) as the answer is made: what a worker times its heartbeats by, whatever the clocks. */
  lease_ms: number;
}

export interface TaskResult {
  content: unknown;
  is_error: boolean;
}

export type OfferRefusal = 'unknown' | 'lost' | 'completed' | 'cancelled';

/** The queue of the calls of http tools (not a tool name: no worker claims it). */
export const HTTP_QUEUE = '~http';

export const idempotencyKey = (r: Pick<TaskRecord, 'session' | 'tool_use_id'>) =>
  `${r.session}:${r.tool_use_id}`;

export const claimedTask = (rec: TaskRecord, input: unknown, leaseMs: number): ClaimedTask => ({
  id: rec.offer,
  session_id: rec.session,
  tool_use_id: rec.tool_use_id,
  name: rec.name,
  input,
  attempt: rec.attempt,
  idempotency_key: idempotencyKey(rec),
  lease_expires_at: new Date(rec.lease).toISOString(),
  lease_ms: leaseMs,
});

/** The `tool.started` event of an attempt once a worker (or the HTTP caller, `worker`) has it. */
export const toolStarted = (rec: TaskRecord, input: unknown, worker: string): [string, string] =>
  eventOf('tool.started', {
    tool_use_id: rec.tool_use_id,
    name: rec.name,
    input,
    attempt: rec.attempt,
    worker_id: worker,
    task_id: rec.offer,
  });

/**
 * The `tool_task.retried` event of an attempt that is offered again, `rec` being the call as offered again (an owed
 * record): its lease was lost (`lease_expired`, sweep-11.lua), or it was an http tool's try that failed
 * (`http_failed`, with the failure in `error`: release-9.lua).
 */
export const toolRetried = (rec: TaskRecord): [string, string] =>
  eventOf('tool_task.retried', {
    tool_use_id: rec.tool_use_id,
    name: rec.name,
    attempt: rec.attempt,
    next_attempt: rec.attempt + 1,
    worker_id: rec.worker,
    ...(rec.failure === undefined
      ? { reason: 'lease_expired' }
      : { reason: 'http_failed', error: rec.failure }),
  });
