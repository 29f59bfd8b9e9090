/**
 * The tool step's calls of tenant tools (spec §7.1): each becomes a task of the tenant's durable queue
 * (src/tenant-tools/tasks.ts), and the run parks. The session stays `running` — nothing is asked of its client —
 * but holds no lease, no due entry and no run slot while its tasks are out: a result (or a failure: lost leases,
 * timeout) is delivered to the session's `result:<id>` field by whichever replica has it
 * (src/tenant-tools/service.ts), which marks the run due and kicks it, and the next run's tool step goes on from
 * the results as it does from a client's. A replica SIGKILLed while tasks are out loses nothing: it held nothing.
 *
 * A step that also waits for the client (a client tool's result, a decision on another call) queues its tasks all
 * the same, before the run ends at `requires_action` (tool-step.ts): the tenant's tools work while the client is
 * asked. A result delivered meanwhile is kept on the step and starts no run; the client's answer starts it, and
 * that run parks here if tasks are still out (their calls `known` to the queue: not queued again). A call that
 * waits for its own approval is queued only once approved.
 */
import {
  pendingFields,
  setResult,
  markStored,
  type PendingCall,
  type PendingStep,
} from '../store/pending.js';
import type { SessionState } from '../store/session-state.js';
import { commit } from './commit.js';
import type { RunDeps, RunHandle } from './run-handle.js';

/** The calls of the step a task answers and that have no result yet. */
export function outstandingTasks(step: PendingStep): PendingCall[] {
  return step.calls.filter(
    (c) => c.runner && !c.result && c.approval !== 'required' && c.approval !== 'denied',
  );
}

/**
 * Writes the step, then queues a task per outstanding call (queued once: a call queued before is left be, see
 * `TaskQueue.enqueue`). Calls the tenant's full queue refuses get an error result, written here. Returns the calls
 * whose tasks are out.
 *
 * The step is in the store before any task is: a worker may claim a task (and deliver its result) the moment it is
 * queued, and a claim or a delivery finds the call in the stored step or takes the session not to wait for it
 * (src/tenant-tools/service.ts `awaits`). A process dying after some enqueues leaves the step as written: the run
 * taken over queues the rest, the others are `known`.
 */
export async function queueTasks(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  step: PendingStep,
  calls: PendingCall[],
): Promise<PendingCall[]> {
  // Never blank the fields of an outstanding call: its result may have been delivered (and announced) since this run
  // read the step.
  await commit(deps, run, { hset: pendingFields(step, calls) });
  markStored(step);
  const full: PendingCall[] = [];
  for (const c of calls) {
    const def = state.tenantTools[c.name];
    const queued =
      deps.tasks && def
        ? await deps.tasks.enqueue(state.tenant, {
            session: state.id,
            toolUseId: c.id,
            round: c.round ?? 0,
            name: c.name,
            input: c.input,
            runner: c.runner ?? 'worker',
            maxAttempts: def.max_attempts,
            timeoutMs: def.timeout_ms,
          })
        : 'full';
    if (queued === 'queued') deps.metrics.toolTasks.inc({ event: 'queued' });
    if (queued === 'full') full.push(c);
  }
  const out = calls.filter((c) => !full.includes(c));
  if (full.length > 0) {
    const max = deps.tasks?.maxPerTenant ?? 0;
    for (const c of full)
      setResult(c, {
        content: `Error: not run: the tenant's tool task queue is full (TOOL_TASKS_MAX_PER_TENANT=${max})`,
        is_error: true,
      });
    await commit(deps, run, { hset: pendingFields(step, out) });
    markStored(step);
  }
  return out;
}

/**
 * Queues the outstanding calls' tasks (`queueTasks`) and gives the run up. 'again' when a result arrived meanwhile,
 * or none could be queued (the run goes on at once), else 'done'.
 */
export async function parkForTasks(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  step: PendingStep,
  calls: PendingCall[],
): Promise<'done' | 'again'> {
  const out = await queueTasks(deps, run, state, step, calls);
  if (out.length === 0) return 'again';
  // By id, not as the run's end (`HeldRun.ended`): the run may go on below, its heartbeat still renewing.
  await deps.store.runs.end(run.id, state.tenant);
  // A result delivered between this run's read and its giving up found the run still holding the lease: go on here.
  const fresh = await deps.store.load(run.id);
  const ids = new Set(out.map((c) => c.id));
  if (fresh?.pending?.calls.some((c) => ids.has(c.id) && c.result)) {
    await deps.store.runs.keep(run.id, deps.leaseTtlMs);
    return 'again';
  }
  return 'done';
}
