/**
 * The tool step's calls of tenant tools (spec §7.1): each becomes a task of the tenant's durable queue
 * (src/tenant-tools/tasks.ts), and the run parks. The session stays `running` — nothing is asked of its client —
 * but holds no lease, no due entry and no run slot while its tasks are out: a result (or a failure: lost leases,
 * timeout) is delivered to the session's `result:<id>` field by whichever replica has it
 * (src/tenant-tools/service.ts), which marks the run due and kicks it, and the next run's tool step goes on from
 * the results as it does from a client's. A replica SIGKILLed while tasks are out loses nothing: it held nothing.
 */
import {
  pendingFields,
  reportedField,
  resultField,
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
 * Writes the step, queues a task per outstanding call (queued once: a call queued before is left be) and gives the
 * run up. 'again' when a result arrived meanwhile (the run goes on at once), else 'done'.
 */
export async function parkForTasks(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  step: PendingStep,
  calls: PendingCall[],
): Promise<'done' | 'again'> {
  const fields = pendingFields(step);
  // Never blank the fields of an outstanding call: its result may have been delivered (and announced) since this run
  // read the step.
  for (const c of calls) {
    delete fields[resultField(c.id)];
    delete fields[reportedField(c.id)];
  }
  await commit(deps, run, { hset: fields });
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
  if (full.length > 0) {
    const max = deps.tasks?.maxPerTenant ?? 0;
    for (const c of full)
      setResult(c, {
        content: `Error: not run: the tenant's tool task queue is full (TOOL_TASKS_MAX_PER_TENANT=${max})`,
        is_error: true,
      });
    const f = pendingFields(step);
    for (const c of calls) {
      if (full.includes(c)) continue;
      delete f[resultField(c.id)];
      delete f[reportedField(c.id)];
    }
    await commit(deps, run, { hset: f });
    markStored(step);
    if (full.length === calls.length) return 'again';
  }
  // By id, not as the run's end (`HeldRun.ended`): the run may go on below, its heartbeat still renewing.
  await deps.store.runs.end(run.id, state.tenant);
  // A result delivered between this run's read and its giving up found the run still holding the lease: go on here.
  const fresh = await deps.store.load(run.id);
  const ids = new Set(calls.map((c) => c.id));
  if (fresh?.pending?.calls.some((c) => ids.has(c.id) && c.result)) {
    await deps.store.runs.keep(run.id, deps.leaseTtlMs);
    return 'again';
  }
  return 'done';
}
