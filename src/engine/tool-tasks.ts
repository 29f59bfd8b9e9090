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
import type { EnqueueOutcome, NewTask } from '../tenant-tools/tasks.js';
import type { RunDeps, RunHandle } from './run-handle.js';

/**
 * Writes the step, then queues a task per outstanding call (queued once: a call queued before is left be, see
 * `TaskQueue.enqueue`). Calls the tenant's full queue refuses get an error result, written here. Returns the calls
 * whose tasks are out.
 *
 * The step is in the store before any task is: a worker may claim a task (and deliver its result) the moment it is
 * queued, and a claim or a delivery finds the call in the stored step or takes the session not to wait for it
 * (src/tenant-tools/service.ts `awaits`). The calls are queued in one script (`enqueueCalls`), so a claim woken by
 * one finds the others; a process dying before it leaves the step as written: the run taken over queues them.
 *
 * A call whose task in its round is settled already (`settled`: delivered, or cancelled) is one this step still waits
 * for only when the stored step has no result for it: the step was rebuilt from the history (`PUT …/messages` after
 * a cancel, or after the round's result went to the model), or a failed step resumed whose task was cancelled while
 * the session had failed. It moves to its next round (written with the step, before its task is queued) and is
 * queued as a task of its own; a result delivered since this run read the step is taken from the store instead
 * (`resettle`). Only this path reads the session again: a step whose calls are new, or known, costs what it did.
 *
 * `fresh`: no task of this step was queued yet (built by this run: from the history after `PUT …/messages`, or from
 * the reply of a `retry` or a rerun). A task the queue knows still out for one of its calls is then another step's,
 * one a write dropped whose cancel (`dropTasks`, after that write) may not have landed yet: the call moves to its
 * next round as a settled one does, and the drop cancels only the old task. Parked on it instead, the run would wait
 * for good once the drop cancels it.
 */
export async function queueTasks(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  step: PendingStep,
  calls: PendingCall[],
  fresh = false,
): Promise<PendingCall[]> {
  const full: PendingCall[] = [];
  let todo = calls;
  let out = calls;
  while (todo.length > 0) {
    // Never blank the fields of an outstanding call: its result may have been delivered (and announced) since this
    // run read the step.
    await commit(deps, run, { hset: pendingFields(step, out) });
    markStored(step);
    const settled: PendingCall[] = [];
    const outcomes = await enqueueCalls(deps, state, todo);
    todo.forEach((c, i) => {
      const queued = outcomes[i];
      if (queued === 'queued') deps.metrics.toolTasks.inc({ event: 'queued' });
      if (queued === 'full') full.push(c);
      if (queued === 'settled' || (fresh && queued === 'known')) settled.push(c);
    });
    todo = settled.length > 0 ? await resettle(deps, run, settled) : [];
    out = out.filter((c) => !full.includes(c) && !c.result);
  }
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
 * Queues the calls' tasks, in one script (TaskQueue `enqueueAll`): a worker's claim woken by the first finds the
 * others queued too, and takes up to its `max` of them, not the first alone. A call whose tool the session has no
 * copy of (or a service without tasks) is 'full': answered with an error, as one the tenant's bound refuses.
 */
async function enqueueCalls(
  deps: RunDeps,
  state: SessionState,
  calls: readonly PendingCall[],
): Promise<EnqueueOutcome[]> {
  const tasks: NewTask[] = [];
  const at: number[] = [];
  calls.forEach((c, i) => {
    const def = state.tenantTools[c.name];
    if (!deps.tasks || !def) return;
    at.push(i);
    tasks.push({
      session: state.id,
      toolUseId: c.id,
      round: c.round ?? 0,
      name: c.name,
      input: c.input,
      runner: c.runner ?? 'worker',
      maxAttempts: def.max_attempts,
      timeoutMs: def.timeout_ms,
    });
  });
  const out = calls.map((): EnqueueOutcome => 'full');
  const got = deps.tasks && tasks.length > 0 ? await deps.tasks.enqueueAll(state.tenant, tasks) : [];
  got.forEach((r, j) => (out[at[j]!] = r));
  return out;
}

/**
 * The calls whose task in their round is settled, or is another step's (`queueTasks`), as the stored step holds them
 * now: one that has its result there (delivered after this run read the step) takes it, and is out no longer; the
 * others move to their next round, to be written with the step and queued anew (returned). The store is read once.
 */
async function resettle(deps: RunDeps, run: RunHandle, settled: PendingCall[]): Promise<PendingCall[]> {
  const stored = await deps.store.load(run.id);
  const anew: PendingCall[] = [];
  for (const c of settled) {
    const now = stored?.pending?.calls.find((x) => x.id === c.id && (x.round ?? 0) === (c.round ?? 0));
    if (now?.result) {
      // As stored (its field, and its `reported` flag: its delivery announced it), so no write of the step's
      // rewrites it and no `tool.completed` is written twice.
      c.result = now.result;
      c.resultStored = true;
      if (now.encoded) c.encoded = now.encoded;
      else delete c.encoded;
      if (now.reported) c.reported = true;
    } else {
      c.round = (c.round ?? 0) + 1;
      anew.push(c);
    }
  }
  return anew;
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
  fresh = false,
): Promise<'done' | 'again'> {
  const out = await queueTasks(deps, run, state, step, calls, fresh);
  if (out.length === 0) return 'again';
  // Not the run's end (`HeldRun.ended`): the run may go on below, its heartbeat still renewing.
  await deps.store.runs.park(run, state.tenant);
  // A result delivered between this run's read and its giving up found the run still holding the lease: go on here.
  const now = await deps.store.load(run.id);
  const ids = new Set(out.map((c) => c.id));
  if (now?.pending?.calls.some((c) => ids.has(c.id) && c.result)) {
    await deps.store.runs.keep(run, deps.leaseTtlMs);
    return 'again';
  }
  return 'done';
}
