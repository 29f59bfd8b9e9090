/**
 * A run's turns through the SDK's tool runner: the max_tokens retry and the commit of each reply, its tools run and
 * their results committed, steps that share the runner's state within one loop (the runner, sending a turn and
 * handing over the next: turn-runner.ts). The runner's
 * params (every SDK cast) are built in runner-params.ts; tool execution (tool-step.ts), eager tools (eager.ts),
 * compaction (compaction.ts; a run that only compacts: compaction-run.ts), tool changes (tools-change.ts) and budgets
 * (budget.ts) are apart.
 *
 * `Turns` holds the runner's loop state (history, thread, spend, iteration) for one runner; its phases are methods:
 * send a turn (and relay its stream: turn-runner.ts), commit the reply, run its tools and commit their results,
 * hand over the next turn (turn-runner.ts).
 */
import { APIUserAbortError } from '@anthropic-ai/sdk';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { extendHistory, type StoredMessage } from '../history.js';
import {
  fitResults,
  pendingFields,
  resultsTurn,
  setResult,
  type PendingCall,
  type PendingStep,
} from '../store/pending.js';
import type { IterationRecord, SessionState } from '../store/session-state.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { budgetExhausted } from './budget.js';
import { commit, endUnlessMerged, idleOps, persistedEvent } from './commit.js';
import { isUnfinished, usageOf, type DueCompaction } from './compaction.js';
import { interruptedResult, pendingCalls, callIdempotent } from './policy.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { pauseForReview, reviewsTurn } from './review-turn.js';
import { afterTools } from './tool-step.js';
import {
  TurnRunner,
  addSpent,
  budgetLeft,
  type Replied,
  type TurnItem,
  type TurnNext,
} from './turn-runner.js';
import { eventOf } from '../events/schemas.js';

/** Drives one SDK tool runner over the persisted history, committing each iteration. */
export async function runTurns(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  budget: number,
  log: EngineLogger,
  /** The history ends with a paused reply (`pause_turn`, a server-side `compaction`): the first turn resumes it. */
  paused = false,
  /**
   * The compaction the last run left, to make alone before queued follow-ups join the history (run.ts `step`): the
   * runner is left once it is committed, and the run's next step merges them after the summary.
   */
  compactOnly: DueCompaction | null = null,
): Promise<'done' | 'again'> {
  const turns = new Turns(deps, run, state, history, log);
  await turns.start(budget, paused, compactOnly);
  return turns.loop(compactOnly !== null);
}

class Turns extends TurnRunner {
  /** `compactOnly`: the runner's first item is a compaction, and the run's next step goes on after it. */
  async loop(compactOnly = false): Promise<'done' | 'again'> {
    for await (const item of this.runner) {
      if (this.compaction.expecting) {
        // The runner yields its compaction like a turn; it replaces its history with the reply when it goes on. It is
        // a record of its own, not a model turn: `iteration` (and so the `max_iterations` budget) does not move.
        this.records++;
        const at = { iteration: this.iteration, n: this.records };
        addSpent(this.spent, await this.compaction.commit(item, this.history, this.params, at));
        // Left before it sends a turn (the loop's return ends the runner's iteration): the follow-ups join the history
        // after the summary first, and the run's next step sends them from a runner over that history.
        if (compactOnly) return 'again';
        // The runner sends the next turn as soon as it is asked: the budget and the tenant's cap are checked first,
        // as before every model request (the compaction itself may have spent them); the run's next step stops it.
        if (await this.spentOut()) return 'again';
        continue;
      }
      const next = await this.turn(item);
      if (next === 'break') break;
      if (next !== 'continue') return next;
    }
    return 'again';
  }

  /** One turn: sent, its reply committed, and its tools run when it calls any. */
  private async turn(item: TurnItem): Promise<TurnNext> {
    this.runnerTurns++;
    this.iteration++;
    this.records++;
    const replied = await this.sendTurn(item);
    const { message, calls } = replied;
    if (this.retriesMaxTokens(message) && !(await this.overCapWith(replied)))
      return this.retryMaxTokens(replied);
    // Policy `pause_after_turn`: the reply waits for review before its calls run (review-turn.ts). A reply that stops
    // with calls (cut at max_tokens, say) is not reviewed: the run stops there anyway, its calls answered "not run".
    const stopsWithCalls = message.stop_reason !== 'tool_use' && calls.length > 0;
    if (reviewsTurn(this.state, isUnfinished(message.stop_reason)) && !stopsWithCalls) {
      const { reply, record, events, carried, usageIncrs } = replied;
      await pauseForReview(this.deps, this.run, this.state, this.runnable, {
        message,
        reply,
        calls,
        record,
        events,
        carried,
        usageIncrs,
      });
      this.run.obs.turnEnded();
      return 'done';
    }
    // As the SDK's runner: only `tool_use` (with calls) runs tools and goes on; `pause_turn` and `compaction` resume
    // the turn; every other reason (`end_turn`, `stop_sequence`, `max_tokens`, `refusal`,
    // `model_context_window_exceeded`, or one this code does not know) stops the run with its calls not run.
    if (message.stop_reason !== 'tool_use' || calls.length === 0) return this.commitStop(replied);
    return this.toolTurn(replied);
  }

  /** Whether the tenant's daily cap is reached with this reply's cost, which its commit has not counted yet. */
  private overCapWith(replied: Replied): Promise<boolean> {
    return this.deps.store.spend.overCap(this.state.tenant, replied.usageIncrs['u_cost'] ?? 0);
  }

  /**
   * on_max_tokens: retry the cut turn with twice the budget, up to the ceiling; the cut reply is dropped. Not past
   * the budget (nor the tenant's daily cap, checked by the caller): a retry is another model request, and a spent
   * budget ends the run with the cut reply instead.
   */
  private retriesMaxTokens(message: BetaMessage): boolean {
    const omt = this.state.onMaxTokens;
    return (
      message.stop_reason === 'max_tokens' &&
      omt !== 'stop' &&
      this.params.max_tokens < omt.ceiling &&
      !budgetExhausted(this.state.budget, this.spent)
    );
  }

  private async retryMaxTokens({ usageIncrs, events }: Replied): Promise<'continue'> {
    const omt = this.state.onMaxTokens;
    if (omt === 'stop') return 'continue'; // not reached: retriesMaxTokens said so
    const bigger = Math.min(this.params.max_tokens * 2, omt.ceiling);
    this.params = { ...this.params, max_tokens: bigger };
    this.iteration--;
    this.records--;
    const iteration = this.iteration;
    this.log.info(
      { iteration, max_tokens: bigger },
      'reply cut at max_tokens; sending the turn again with a bigger budget',
    );
    const res = await commit(this.deps, this.run, {
      // The dropped reply ended the thread, which the next turn does not continue.
      hset: { params: JSON.stringify(this.params), thread: '' },
      hincr: { params_rev: 1, ...usageIncrs },
      events: [
        ...events,
        eventOf('turn.dropped', { iteration: iteration + 1, reason: 'max_tokens_retry' }),
        eventOf('params.updated', { params: { max_tokens: bigger }, reason: 'max_tokens_retry' }),
      ],
    });
    this.paramsRev = res.paramsRev;
    this.runner.setMessagesParams({
      ...this.runner.params,
      max_tokens: bigger,
      max_iterations: this.runnerTurns + Math.max(1, budgetLeft(this.state, iteration)),
    });
    return 'continue';
  }

  /** Commits a reply that calls no tool to run: an unfinished turn the runner resumes, or the end of the run. */
  private async commitStop(replied: Replied): Promise<TurnNext> {
    const { deps, run, state, history } = this;
    const { message, reply, calls, record, carried, usageIncrs, events } = replied;
    // An unfinished turn (`pause_turn`, or `compaction` from server-side compaction) is resumed by the runner.
    const ends = !isUnfinished(message.stop_reason);
    const stopReason = message.stop_reason ?? 'end_turn';
    // Calls of a reply that stopped for another reason (cut at max_tokens, say) are not run — their input may be
    // cut off — but answered at once, so no unanswered tool_use is ever left in the history.
    const unrun = resultsTurn(calls, () =>
      interruptedResult(`not run: the reply stopped with ${stopReason}`),
    );
    const res = await commit(
      deps,
      run,
      {
        push_msgs: [JSON.stringify(reply)],
        push_iters: [JSON.stringify(record)],
        hset: carried,
        hincr: { iteration: 1, ...usageIncrs },
        events: [...events, persistedEvent(this.iteration, this.records)],
        ...(ends
          ? { queue: { ...(unrun.length ? { results: unrun } : {}), none: idleOps(stopReason) } }
          : {}),
      },
      // The run ended (no follow-up merged): its slot goes back alongside the turn's record.
      ends ? endUnlessMerged(deps, run, state.tenant) : undefined,
    );
    history.push(reply);
    run.obs.turnEnded();
    if (!ends) {
      // pause_turn, compaction: the runner resumes the turn, another model request. With the budget or the tenant's
      // cap spent, the run's next step stops the run instead (it finds the paused reply and the budget spent).
      return (await this.spentOut()) ? 'again' : 'continue';
    }
    extendHistory(history, res);
    if (res.mergedCount === 0) return 'done';
    if (budgetLeft(state, this.iteration) <= 0 || !(await this.handOver(res.paramsRev))) return 'again';
    this.compaction.afterHandOver(usageOf(message), history);
    return 'continue';
  }

  /**
   * The reply calls tools. Calls that wait for a client (approval, client tools) end this runner: the reply is
   * committed with its pending step, and the next step answers it. Otherwise the tools run here and their results
   * are committed (with the reply, when one commit may hold both).
   */
  private async toolTurn(replied: Replied): Promise<TurnNext> {
    const { state, runnable } = this;
    const pending = pendingCalls(state, replied.calls, runnable);
    // A tenant tool's call waits too: the tool step makes it a task (src/engine/tool-tasks.ts).
    const waits = pending.some((c) => c.approval === 'required' || c.kind === 'client' || c.runner);
    const autoServer = pending.filter((c) => c.kind === 'server' && c.approval === 'auto');
    for (const c of autoServer) if (!waits) c.started = true;
    const step: PendingStep = {
      calls: pending,
      review: false,
      iteration: this.iteration,
      record: this.records,
    };
    const replyOps = await this.commitReply(replied, step, waits, autoServer);
    this.history.push(replied.reply);
    if (waits) {
      // Its tenant tools' tasks are queued by the tool step next, as of a step new to the queue (tool-tasks.ts).
      this.run.freshStep = true;
      return 'again';
    }
    await this.runTools(replied.record, pending);
    return this.commitResults(replied.message, step, replied.record, replyOps);
  }

  /**
   * One round trip per iteration when every call is to an idempotent server tool: the reply is committed with its
   * results (the ops returned go with them). A crash while they run loses the reply, and the turn is sent again —
   * which may run those tools again, harmless as they are idempotent. Otherwise the reply (with its calls marked
   * started) is committed first, so a non-idempotent call interrupted by a crash is answered "interrupted" instead of
   * running twice.
   */
  private async commitReply(
    { reply, record, carried, usageIncrs, events }: Replied,
    step: PendingStep,
    waits: boolean,
    autoServer: PendingCall[],
  ): Promise<ApplyOps | null> {
    const { deps, run, runnable } = this;
    const started = waits
      ? []
      : autoServer.map((c): [string, string] =>
          eventOf('tool.started', { tool_use_id: c.id, name: c.name, input: c.input }),
        );
    const replyEvents: Array<[string, string]> = [...events, ...started];
    const replyOps: ApplyOps = {
      push_msgs: [JSON.stringify(reply)],
      hset: carried,
      hincr: { iteration: 1, ...usageIncrs },
      events: replyEvents,
    };
    const oneCommit =
      !waits &&
      step.calls.every((c) => !runnable.has(c.name) || callIdempotent(runnable.get(c.name), c.input));
    if (oneCommit) {
      // Live clients still see the turn end and the tools start now; these events change no session field.
      run.news.send(replyEvents);
      replyOps.events = [];
      // The reply was billed: its usage goes with the run's next commit, the results' or a cancel's, whichever
      // comes (a cancel while the tools run drops the reply, not what it cost).
      run.bill(usageIncrs);
      replyOps.hincr = { iteration: 1 };
      return replyOps;
    }
    await commit(deps, run, {
      ...replyOps,
      push_iters: [JSON.stringify(record)],
      hset: { ...carried, ...pendingFields(step) },
    });
    return null;
  }

  /** Runs the reply's tools through the runner; their results set on the pending calls. */
  private async runTools(record: IterationRecord, pending: PendingCall[]): Promise<void> {
    const { run } = this;
    const toolsT0 = performance.now();
    // With the turn's span current, so the SDK's tool spans nest under it.
    const toolMessage = await run.obs.inTurn(() => this.runner.generateToolResponse());
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
    // The step's results together at most MAX_TURN_BYTES (tool-step.ts, the same bound): the history committed is
    // what the runner sends next, so a result replaced here is what the model sees.
    fitResults(pending, new Set(pending.map((c) => c.id)), this.deps.store.maxTurnBytes);
  }

  /** Commits the tools' results (tool-step.ts) and hands the runner the next turn. */
  private async commitResults(
    message: BetaMessage,
    step: PendingStep,
    record: IterationRecord,
    replyOps: ApplyOps | null,
  ): Promise<TurnNext> {
    const { deps, run, state, history } = this;
    const { outcome, paramsRev: storedRev } = await afterTools(
      deps,
      run,
      state,
      history,
      step,
      record,
      this.durations,
      replyOps,
    );
    run.obs.turnEnded();
    if (outcome !== 'continue') return outcome === 'done' ? 'done' : 'again';
    // What was committed is what the runner sends next: our history, with the results (and any follow-ups).
    if (budgetLeft(state, this.iteration) <= 0 || !(await this.handOver(storedRev))) return 'break';
    this.compaction.afterHandOver(usageOf(message), history);
    return 'continue';
  }
}
