/**
 * A run's turns through the SDK's tool runner: the hand-over of persisted history to a runner, streaming, the
 * max_tokens retry and the commit of each reply, steps that share the runner's state within one loop. The runner's
 * params (every SDK cast) are built in runner-params.ts; tool execution (tool-step.ts), eager tools (eager.ts),
 * compaction (compaction.ts; a run that only compacts: compaction-run.ts), tool changes (tools-change.ts) and budgets
 * (budget.ts) are apart.
 *
 * Over 400 lines because `runTurns` holds the runner's loop state (history, thread, spend, iteration) in one
 * closure; it becomes methods of one `Run` object in the design step (issue 23), which splits this file.
 */
import { APIUserAbortError } from '@anthropic-ai/sdk';
import type { BetaToolRunnerParams } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import type {
  BetaMessage,
  BetaRawMessageStreamEvent,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { extendHistory, toolCallsOf, type StoredMessage } from '../history.js';
import type { SessionParams } from '../schemas.js';
import { pendingFields, resultsTurn, setResult, type PendingStep } from '../store/pending.js';
import { usageIncr, type IterationRecord, type SessionState } from '../store/session-state.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { usdToMicros } from '../cost/prices.js';
import { budgetExhausted, spentOf, totalTokens, type Spent } from './budget.js';
import { cacheMarks, capCacheMarks } from './cache-breakpoints.js';
import { commit, countSpend, idleOps } from './commit.js';
import { RunCompaction, isUnfinished, recordedUsage, usageOf } from './compaction.js';
import { interruptedResult, pendingCalls, callIdempotent } from './policy.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { holdUnsafeCalls, runsToolsEagerly } from './eager.js';
import { runnerParams } from './runner-params.js';
import { anchorOf, startRunner } from './thread-anchor.js';
import { pauseForReview, reviewsTurn } from './review-turn.js';
import { StreamRelay } from './stream-relay.js';
import { afterTools, serverRunnables, sessionTools } from './tool-step.js';
import {
  INLINE_TOOLS_BETA,
  applyToolChange,
  baseTools,
  clientToolDefs,
  pendingToolChange,
} from './tools-change.js';
import { eventOf } from '../events/schemas.js';

/** The fields a PATCH (or a compaction request) may change that a live runner takes up before its next turn. */
const LIVE_FIELDS = [
  'review',
  'approval',
  'onToolError',
  'onMaxTokens',
  'cacheToolResults',
  'maxIterations',
  'stream',
  'budget',
  'compaction',
  'compactRequest',
  'runToolsEagerly',
  'pauseAfterTurn',
  'tools',
  'toolsSent',
] as const satisfies readonly (keyof SessionState)[];

function takeUp<K extends keyof SessionState>(to: SessionState, from: SessionState, key: K): void {
  to[key] = from[key];
}

/** Adds a turn's usage (as recorded) to what the budget counts. */
function addSpent(spent: Spent, u: IterationRecord['usage']): void {
  spent.tokens += totalTokens(u);
  spent.micros += u.cost_usd ? usdToMicros(u.cost_usd) : 0;
}

const budgetLeft = (state: SessionState, iteration: number) =>
  state.maxIterations - (iteration - state.runStart);

/** Drives one SDK tool runner over the persisted history, committing each iteration. */
export async function runTurns(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  budget: number,
  log: EngineLogger,
): Promise<'done' | 'again'> {
  const { store } = deps;
  const durations = new Map<string, number>();
  // Resolved once per runner: an MCP server's tool list change is taken up by the next run.
  const runnable = await sessionTools(deps, state);
  // After a PATCH of `tools`, runners still send the set at create as `tools` (src/engine/tools-change.ts).
  const tools: BetaToolRunnerParams['tools'] = state.toolsBase
    ? await baseTools(deps, state, durations)
    : [...serverRunnables(deps, runnable, durations), ...clientToolDefs(state)];
  /** A history given at create may hold tool changes (`system` messages) of another session's runs. */
  const toolChangesIn = history.some((m) => m.role === 'system');
  /** Once tool changes are in the history (or about to be), their beta goes with every request. */
  const withToolChanges = (p: SessionParams): SessionParams =>
    (state.toolsSent === null && !toolChangesIn) || p.betas?.includes(INLINE_TOOLS_BETA)
      ? p
      : { ...p, betas: [...(p.betas ?? []), INLINE_TOOLS_BETA] };
  let params = state.params;
  let paramsRev = state.paramsRev;
  let iteration = state.iteration;
  /** The session's total tokens (policy `budget`): as stored at the start, plus each reply of this runner. */
  let spent = spentOf(state);
  // At most 4 cache breakpoints in what the model sees, the thread's stored history included (cache-breakpoints.ts).
  const capMarks = () => capCacheMarks(history, cacheMarks(params.system) + cacheMarks(tools));
  capMarks();
  /** The code-execution container the session's requests go on in (the SDK's runner adopts it from each reply). */
  let container = state.container;
  // Over the session's message thread when it still holds the history (thread-anchor.ts).
  const runner = startRunner(
    deps.client,
    runnerParams({
      params: withToolChanges(params),
      messages: history,
      tools,
      maxIterations: budget,
      stream: state.stream,
      eager: runsToolsEagerly(state),
      container,
    }),
    // The SDK's own request option: its spans of this runner name the session as their conversation.
    { signal: run.controller.signal, openTelemetry: { conversationId: run.id } },
    state.thread,
  );
  // Compactions asked for (route, policy) run before the next turn: see compaction.ts.
  const compaction = new RunCompaction(deps, run, state, runner);
  await compaction.atStart(history);

  const change = await pendingToolChange(deps, state, durations, true);
  if (change) await applyToolChange(deps, run, runner, state, history, change);

  /** The `system` of this runner's thread (JSON). */
  const threadSystem = JSON.stringify(params.system);
  /** Turns this runner sent (its own `max_iterations` counts them, dropped retries included). */
  let runnerTurns = 0;
  /**
   * Hands the runner the committed history for the next turn, with the params and policies a PATCH may have
   * changed since (seen through `params_rev` in the commit's answer, or the `ctl` channel). False when this runner
   * sends no next turn: the budget is spent (the run's next step stops the run), or `system` changed (the next step
   * builds a new runner).
   */
  const handOver = async (storedRev: number): Promise<boolean> => {
    if (run.paramsDirty || storedRev !== paramsRev) {
      const fresh = await store.load(run.id);
      if (fresh) {
        params = fresh.params;
        paramsRev = fresh.paramsRev;
        spent = spentOf(fresh);
        for (const key of LIVE_FIELDS) takeUp(state, fresh, key);
      }
      run.paramsDirty = false;
    }
    if (budgetExhausted(state.budget, spent)) return false;
    // Over the tenant's daily cap: no next request from this runner; the run's next step stops the run.
    if (await store.spend.overCap(state.tenant)) return false;
    // A thread keeps the `system` it was created with (the SDK throws on a change): a new `system` ends this runner,
    // and the next one starts a new thread with it.
    if (JSON.stringify(params.system) !== threadSystem) return false;
    const handTo = () => {
      capMarks();
      runner.setMessagesParams(
        runnerParams({
          params: withToolChanges(params),
          messages: [...history],
          tools,
          maxIterations: runnerTurns + Math.max(1, budgetLeft(state, iteration)),
          stream: state.stream,
          eager: runsToolsEagerly(state),
          container,
        }),
      );
    };
    // A PATCH of `tools`: told to the model ahead of the next turn; the runner gets the history without that message,
    // which it appends itself.
    const change = await pendingToolChange(deps, state, durations, false);
    if (change) await applyToolChange(deps, run, runner, state, history, change, handTo);
    else handTo();
    return true;
  };

  for await (const item of runner) {
    if (compaction.expecting) {
      // The runner yields its compaction like a turn; it replaces its history with the reply when it goes on.
      iteration++;
      addSpent(spent, await compaction.commit(item, history, params, iteration));
      continue;
    }
    runnerTurns++;
    iteration++;
    const startedAt = Date.now();
    const t0 = performance.now();
    run.obs.turnStarted(iteration, params);
    let firstEventMs: number | null = null;
    const buffered: Array<[string, string]> = [
      eventOf('turn.started', { iteration, message_count: history.length }),
    ];
    let message: BetaMessage;
    if ('finalMessage' in item) {
      const relay = new StreamRelay(store, run.id, deps.streamBatchEvents, buffered);
      holdUnsafeCalls(runner, item, state, runnable);
      item.on('streamEvent', (event: BetaRawMessageStreamEvent) => {
        if (firstEventMs === null) firstEventMs = Math.round(performance.now() - t0);
        relay.push(['stream.event', `{"iteration":${iteration},"event":${JSON.stringify(event)}}`]);
      });
      try {
        message = await item.finalMessage();
      } finally {
        buffered.length = 0;
        // Not `push(...rest)`: spreading a long array into arguments overflows the stack (RangeError).
        for (const ev of await relay.drain()) buffered.push(ev);
      }
    } else {
      // Live news only, like the stream relay's writes: a store outage here must not cost the turn, whose
      // request is already on its way (its commit rides the outage out).
      await store.appendEvents(run.id, buffered.splice(0)).catch(() => {});
      // Without streaming the runner yields the turn's pending reply.
      message = await item;
    }
    const upstreamMs = Math.round(performance.now() - t0);
    // Counted once per turn, with its usage, in the commit that stores the turn (or drops it: it was billed).
    const costMicros = store.spend.prices.turnCost(params.model, message.usage);
    const usageIncrs = usageIncr(message.usage, costMicros);
    countSpend(deps, state.tenant, params.model, usageIncrs);
    addSpent(spent, recordedUsage(message, costMicros));
    const reply: StoredMessage = { role: 'assistant', content: message.content };
    const calls = toolCallsOf(reply);
    // Persisted with the reply: the container it ran in, the thread it ends (thread-anchor.ts).
    if (message.container?.id) container = message.container.id;
    const anchor = anchorOf(message, [...history, reply], params.system, tools);
    const carried: Record<string, string> = {
      thread: anchor ? JSON.stringify(anchor) : '',
      ...(container !== state.container ? { container: container ?? '' } : {}),
    };
    const record: IterationRecord = {
      iteration,
      reply_index: state.msgBase + history.length,
      results_index: null,
      request: {
        model: params.model,
        max_tokens: params.max_tokens,
        message_count: history.length,
        params_rev: paramsRev,
      },
      stop_reason: message.stop_reason,
      usage: recordedUsage(message, costMicros),
      tool_calls: calls.map(({ id, name }) => ({ id, name })),
      started_at: new Date(startedAt).toISOString(),
      completed_at: new Date().toISOString(),
      timings: { upstream_ms: upstreamMs, first_event_ms: firstEventMs, tools_ms: null },
    };
    run.obs.turnReplied(message, record.timings);
    const completedEvent: [string, string] = [
      'turn.completed',
      JSON.stringify({ iteration, message, usage: record.usage }),
    ];

    // on_max_tokens: retry the cut turn with twice the budget, up to the ceiling; the cut reply is dropped.
    const omt = state.onMaxTokens;
    // Not past the budget: a retry is another turn, and a spent budget ends the run with the cut reply instead.
    if (
      message.stop_reason === 'max_tokens' &&
      omt !== 'stop' &&
      params.max_tokens < omt.ceiling &&
      !budgetExhausted(state.budget, spent)
    ) {
      const bigger = Math.min(params.max_tokens * 2, omt.ceiling);
      params = { ...params, max_tokens: bigger };
      iteration--;
      log.info(
        { iteration, max_tokens: bigger },
        'reply cut at max_tokens; sending the turn again with a bigger budget',
      );
      const res = await commit(deps, run, {
        // The dropped reply ended the thread, which the next turn does not continue.
        hset: { params: JSON.stringify(params), thread: '' },
        hincr: { params_rev: 1, ...usageIncrs },
        events: [
          ...buffered,
          completedEvent,
          eventOf('turn.dropped', { iteration: iteration + 1, reason: 'max_tokens_retry' }),
          eventOf('params.updated', { params: { max_tokens: bigger }, reason: 'max_tokens_retry' }),
        ],
      });
      paramsRev = res.paramsRev;
      runner.setMessagesParams({
        ...runner.params,
        max_tokens: bigger,
        max_iterations: runnerTurns + Math.max(1, budgetLeft(state, iteration)),
      });
      continue;
    }

    // Policy `pause_after_turn`: the reply waits for review before its calls run (review-turn.ts). A reply that stops
    // with calls (cut at max_tokens, say) is not reviewed: the run stops there anyway, its calls answered "not run".
    const stopsWithCalls = message.stop_reason !== 'tool_use' && calls.length > 0;
    if (reviewsTurn(state, isUnfinished(message.stop_reason)) && !stopsWithCalls) {
      const events = [...buffered, completedEvent];
      await pauseForReview(deps, run, state, runnable, { message, reply, calls, record, events, carried });
      run.obs.turnEnded();
      return 'done';
    }
    // As the SDK's runner: only `tool_use` (with calls) runs tools and goes on; `pause_turn` and `compaction` resume
    // the turn; every other reason (`end_turn`, `stop_sequence`, `max_tokens`, `refusal`,
    // `model_context_window_exceeded`, or one this code does not know) stops the run with its calls not run.
    const stops = message.stop_reason !== 'tool_use' || calls.length === 0;
    if (stops) {
      // An unfinished turn (`pause_turn`, or `compaction` from server-side compaction) is resumed by the runner.
      const ends = !isUnfinished(message.stop_reason);
      const stopReason = message.stop_reason ?? 'end_turn';
      // Calls of a reply that stopped for another reason (cut at max_tokens, say) are not run — their input may be
      // cut off — but answered at once, so no unanswered tool_use is ever left in the history.
      const unrun = resultsTurn(calls, () =>
        interruptedResult(`not run: the reply stopped with ${stopReason}`),
      );
      const res = await commit(deps, run, {
        push_msgs: [JSON.stringify(reply)],
        push_iters: [JSON.stringify(record)],
        hset: carried,
        hincr: { iteration: 1, ...usageIncrs },
        events: [
          ...buffered,
          completedEvent,
          ['iteration.persisted', JSON.stringify({ iteration, revision: null }), 'rev'],
        ],
        ...(ends
          ? {
              queue: {
                ...(unrun.length ? { results: unrun } : {}),
                none: idleOps(stopReason),
              },
            }
          : {}),
      });
      history.push(reply);
      run.obs.turnEnded();
      if (!ends) continue; // pause_turn, compaction: the runner resumes the turn
      extendHistory(history, res);
      if (res.mergedCount === 0) {
        await store.runs.unmarkDue(run.id, state.tenant);
        return 'done';
      }
      if (budgetLeft(state, iteration) <= 0 || !(await handOver(res.paramsRev))) return 'again';
      compaction.afterHandOver(usageOf(message), history);
      continue;
    }

    // The reply calls tools. Calls that wait for a client (approval, client tools) end this runner: the reply is
    // committed with its pending step, and the next step answers it.
    const pending = pendingCalls(state, calls, runnable);
    // A tenant tool's call waits too: the tool step makes it a task (src/engine/tool-tasks.ts).
    const waits = pending.some((c) => c.approval === 'required' || c.kind === 'client' || c.runner);
    const autoServer = pending.filter((c) => c.kind === 'server' && c.approval === 'auto');
    for (const c of autoServer) if (!waits) c.started = true;
    const step: PendingStep = { calls: pending, review: false, iteration };
    const started = waits
      ? []
      : autoServer.map((c): [string, string] =>
          eventOf('tool.started', { tool_use_id: c.id, name: c.name, input: c.input }),
        );
    const replyEvents: Array<[string, string]> = [...buffered, completedEvent, ...started];
    const replyOps: ApplyOps = {
      push_msgs: [JSON.stringify(reply)],
      hset: carried,
      hincr: { iteration: 1, ...usageIncrs },
      events: replyEvents,
    };
    // One round trip per iteration when every call is to an idempotent server tool: the reply is committed with
    // its results. A crash while they run loses the reply, and the turn is sent again — which may run those tools
    // again, harmless as they are idempotent. Otherwise the reply (with its calls marked started) is committed
    // first, so a non-idempotent call interrupted by a crash is answered "interrupted" instead of running twice.
    const oneCommit =
      !waits && pending.every((c) => !runnable.has(c.name) || callIdempotent(runnable.get(c.name), c.input));
    if (oneCommit) {
      // Live clients still see the turn end and the tools start now; these events change no session field.
      void store.appendEvents(run.id, replyEvents).catch(() => {});
      replyOps.events = [];
    } else {
      await commit(deps, run, {
        ...replyOps,
        push_iters: [JSON.stringify(record)],
        hset: { ...carried, ...pendingFields(step) },
      });
    }
    history.push(reply);
    if (waits) return 'again';

    const toolsT0 = performance.now();
    // With the turn's span current, so the SDK's tool spans nest under it.
    const toolMessage = await run.obs.inTurn(() => runner.generateToolResponse());
    record.timings.tools_ms = Math.round(performance.now() - toolsT0);
    // Tools cut short by a shutdown are not answered here: the pending step keeps them `started`, and the replica
    // that resumes the run runs the idempotent ones again and answers the others "interrupted".
    if (run.leavesToolsUnanswered) throw new APIUserAbortError();
    const blocks = typeof toolMessage?.content === 'object' ? toolMessage.content : [];
    for (const c of pending) {
      const b = blocks.find((x) => x.type === 'tool_result' && x.tool_use_id === c.id);
      setResult(
        c,
        b?.type === 'tool_result'
          ? { content: b.content ?? '', is_error: b.is_error === true }
          : interruptedResult('no result'),
      );
    }
    const { outcome, paramsRev: storedRev } = await afterTools(
      deps,
      run,
      state,
      history,
      step,
      record,
      durations,
      oneCommit ? replyOps : null,
    );
    run.obs.turnEnded();
    if (outcome !== 'continue') return outcome === 'done' ? 'done' : 'again';
    // What was committed is what the runner sends next: our history, with the results (and any follow-ups).
    if (budgetLeft(state, iteration) <= 0 || !(await handOver(storedRev))) break;
    compaction.afterHandOver(usageOf(message), history);
  }
  return 'again';
}
