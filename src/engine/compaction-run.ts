/**
 * A run that only compacts: a compaction asked for while the session was idle or failed (see compaction.ts). One
 * runner sends the compaction request alone, committed with the end of the run.
 */
import type { BetaToolRunner } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import { TENANT_BUDGET_EXHAUSTED } from '../cost/spend.js';
import { eventOf } from '../events/schemas.js';
import type { StoredMessage } from '../history.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { recordCount, type SessionState } from '../store/session-state.js';
import { BUDGET_EXHAUSTED, budgetExhausted, spentOf, unpricedError } from './budget.js';
import { commit, endOps, endUnlessMerged, followUpsAfter, mergeOps } from './commit.js';
import { commitCompaction, withCompactionBeta } from './compaction.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { runnerParams } from './runner-params.js';
import { sessionTools } from './tool-step.js';
import { historyChanges, toolsToSend, withInlineToolsBeta } from './tools-change.js';
import { capCacheMarks, fixedMarks } from './cache-breakpoints.js';

/** A run that only compacts (asked for while the session was idle or failed): one runner, one request. */
export async function runCompactionOnly(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  log: EngineLogger,
): Promise<'done' | 'again'> {
  const spent = await spentReason(deps, state);
  if (spent !== null) return skipCompaction(deps, run, state, history, spent, log);
  // The request is a turn's (the summary reads the calls in the history with them): the tools as a runner sends them
  // (the set at create once `tools` were PATCHed: the history's tool changes take it to the current one), their
  // beta, at most 4 cache breakpoints, the container.
  const tools = await toolsToSend(deps, state, await sessionTools(deps, state), new Map());
  const params = withInlineToolsBeta(withCompactionBeta(state.params), state, historyChanges(history));
  capCacheMarks(history, fixedMarks(params, tools));
  const runner = deps.client.beta.messages.toolRunner(
    runnerParams({
      params,
      messages: history,
      tools,
      maxIterations: 1,
      stream: state.stream,
      eager: false,
      container: state.container,
    }),
    { signal: run.controller.signal, openTelemetry: { conversationId: run.id } },
  );
  return compactOnly(deps, run, state, history, runner, log);
}

/**
 * A compaction run: the session was idle or failed when it was asked for. One runner that sends only the compaction,
 * committed together with the end of the run (the status it had, unless follow-ups came meanwhile: then they become
 * the next user turn and the run goes on).
 */
async function compactOnly(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  runner: BetaToolRunner<boolean>,
  log: EngineLogger,
): Promise<'done' | 'again'> {
  const request = state.compactRequest!;
  runner.compactBeforeNextTurn({
    type: 'summarize',
    ...(request.instructions ? { instructions: request.instructions } : {}),
  });
  const it = runner[Symbol.asyncIterator]();
  try {
    const first = await it.next();
    if (first.done) throw new Error('the runner sent no compaction request');
    // A record of its own after the session's last one; `iteration` (model turns) stays.
    const at = { iteration: state.iteration, n: recordCount(state) + 1 };
    // Where follow-ups go depends on the reply: after a summary, which the same script puts in place of the history
    // before it merges them, they are a new user turn; without one, they go where they would after `history`.
    const merged = (
      await commitCompaction(
        deps,
        run,
        state,
        history,
        first.value,
        state.params,
        at,
        true,
        (summarized) => resumeEnd(state, summarized ? [] : history),
        endUnlessMerged(deps, run, state.tenant),
      )
    ).mergedCount;
    log.info(at, 'compacted');
    return afterCompactionRun(merged);
  } finally {
    // The runner would go on to the next turn: this run only compacts.
    await it.return?.(undefined);
  }
}

/**
 * The end of a compaction run: the status the session had (its stop reason, error and pending step), unless
 * follow-ups came meanwhile — then they join the history after `history` (merged onto a trailing user turn; after a
 * paused reply they stay queued, as when any run stops) and the run goes on.
 */
function resumeEnd(state: SessionState, history: StoredMessage[]): ApplyOps {
  const resume = state.compactRequest!.resume!;
  const end = endOps({
    status: resume.status,
    stopReason: resume.stop_reason,
    error: resume.error,
    // The step stayed in its field through the compaction run (with its results, stored: not written again).
    pending: resume.pending ?? state.pending,
  });
  const { queue } = followUpsAfter(history.at(-1));
  return queue ? { queue: { ...queue, none: end } } : end;
}

/**
 * Why a compaction run may send no request: the session's budget or its tenant's daily cap is spent, or its model has
 * no price under a dollar ceiling — the checks before every model request (run.ts `step`), which a compaction request
 * is too. It matters for a compaction asked for while a run was in flight that then stopped for one of these: the
 * compaction is left to a run of its own (`leftoverCompaction`), which no route's check comes before.
 */
async function spentReason(deps: RunDeps, state: SessionState): Promise<string | null> {
  if (budgetExhausted(state.budget, spentOf(state))) return BUDGET_EXHAUSTED;
  if (await deps.store.spend.overCap(state.tenant)) return TENANT_BUDGET_EXHAUSTED;
  return unpricedError(deps.store.spend, state.params, state.budget)?.code ?? null;
}

/**
 * The compaction is not sent: `compaction.skipped` with the reason (`n`: the record it would have made, as a
 * takeover's skip says), the request cleared, the session back in its status; the history is unchanged.
 */
async function skipCompaction(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  reason: string,
  log: EngineLogger,
): Promise<'done' | 'again'> {
  const at = { iteration: state.iteration, n: recordCount(state) + 1 };
  const res = await commit(
    deps,
    run,
    mergeOps(
      { hset: { compact: '' }, events: [eventOf('compaction.skipped', { ...at, reason })] },
      resumeEnd(state, history),
    ),
    endUnlessMerged(deps, run, state.tenant),
  );
  state.compactRequest = null;
  log.info({ ...at, reason }, 'compaction skipped');
  return afterCompactionRun(res.mergedCount);
}

/**
 * The run ended with the commit that put the session back in its status (its end sent alongside: `endUnlessMerged`),
 * unless that commit merged follow-ups (it stayed `running`, its lease held): then the next step sends them. Decided
 * from the commit, not a read after it: the session given back may be running again already, someone else's run.
 */
function afterCompactionRun(merged: number): 'done' | 'again' {
  return merged > 0 ? 'again' : 'done';
}
