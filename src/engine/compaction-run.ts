/**
 * A run that only compacts: a compaction asked for while the session was idle or failed (see compaction.ts). One
 * runner sends the compaction request alone, committed with the end of the run.
 */
import type { BetaToolRunner } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import type { StoredMessage } from '../history.js';
import { recordCount, type SessionState } from '../store/session-state.js';
import { endOps } from './commit.js';
import { commitCompaction, withCompactionBeta } from './compaction.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { runnerParams } from './runner-params.js';
import { sessionTools } from './tool-step.js';
import { toolsToSend, withInlineToolsBeta } from './tools-change.js';
import { cacheMarks, capCacheMarks } from './cache-breakpoints.js';

/** A run that only compacts (asked for while the session was idle or failed): one runner, one request. */
export async function runCompactionOnly(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  log: EngineLogger,
): Promise<'done' | 'again'> {
  // The request is a turn's (the summary reads the calls in the history with them): the tools as a runner sends them
  // (the set at create once `tools` were PATCHed: the history's tool changes take it to the current one), their
  // beta, at most 4 cache breakpoints, the container.
  const tools = await toolsToSend(deps, state, await sessionTools(deps, state), new Map());
  const params = withInlineToolsBeta(
    withCompactionBeta(state.params),
    state,
    history.some((m) => m.role === 'system'),
  );
  capCacheMarks(history, cacheMarks(params.system) + cacheMarks(tools));
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
  const resume = request.resume!;
  runner.compactBeforeNextTurn({
    type: 'summarize',
    ...(request.instructions ? { instructions: request.instructions } : {}),
  });
  const it = runner[Symbol.asyncIterator]();
  try {
    const first = await it.next();
    if (first.done) throw new Error('the runner sent no compaction request');
    const end = endOps({
      status: resume.status,
      stopReason: resume.stop_reason,
      error: resume.error,
      // The step stayed in its field through the compaction run (with its results, stored: not written again).
      pending: resume.pending ?? state.pending,
    });
    const before = history.length;
    // A record of its own after the session's last one; `iteration` (model turns) stays.
    const at = { iteration: state.iteration, n: recordCount(state) + 1 };
    await commitCompaction(deps, run, state, history, first.value, state.params, at, true, {
      queue: {
        // After a summary, follow-ups are a new user turn; without one, onto a trailing user turn.
        ...(history.length === before && history.at(-1)?.role === 'user' ? { into_last: true } : {}),
        none: end,
      },
    });
    log.info(at, 'compacted');
  } finally {
    // The runner would go on to the next turn: this run only compacts.
    await it.return?.(undefined);
  }
  const fresh = await deps.store.load(run.id);
  if (fresh?.status !== 'running') {
    await deps.store.runs.end(run);
    return 'done';
  }
  return 'again';
}
