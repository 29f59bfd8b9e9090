/**
 * The state of one SDK tool runner over a session's history, and what sending a turn takes: the runner built (its
 * params: runner-params.ts), a turn sent and its stream relayed, its reply's record and usage, the next turn handed
 * over with what a PATCH changed. `Turns` (turns.ts) commits what the turns bring.
 */
import type { BetaToolRunner, BetaToolRunnerParams } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import type {
  BetaMessage,
  BetaRawMessageStreamEvent,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { sendable, storedReplyContent, toolCallsOf, type StoredMessage } from '../history.js';
import type { SessionParams } from '../schemas.js';
import { recordCount, usageIncr, type IterationRecord, type SessionState } from '../store/session-state.js';
import { usdToMicros, withCompactionUsage } from '../cost/prices.js';
import { withoutOpenCalls } from '../tools/server-blocks.js';
import { budgetExhausted, spentOf, totalTokens, unpricedError, type Spent } from './budget.js';
import { cacheMarks, capCacheMarks, fixedMarks } from './cache-breakpoints.js';
import { countSpend } from './commit.js';
import { RunCompaction, isUnfinished, recordedUsage, type DueCompaction } from './compaction.js';
import type { EngineLogger, RunDeps, RunHandle } from './run-handle.js';
import { holdUnsafeCalls, runsToolsEagerly } from './eager.js';
import { runnerParams } from './runner-params.js';
import { ThreadDigest, anchorOf, startRunner } from './thread-anchor.js';
import { StreamRelay } from './stream-relay.js';
import { upstreamContext } from '../observability/upstream-fetch.js';
import { sessionTools } from './tool-step.js';
import {
  applyToolChange,
  historyChanges,
  pendingToolChange,
  toldOf,
  toolsToSend,
  withInlineToolsBeta,
  type HistoryChanges,
  type ToolChange,
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
export function addSpent(spent: Spent, u: IterationRecord['usage']): void {
  spent.tokens += totalTokens(u);
  spent.micros += u.cost_usd ? usdToMicros(u.cost_usd) : 0;
}

export const budgetLeft = (state: SessionState, iteration: number) =>
  state.maxIterations - (iteration - state.runStart);

export type Runner = BetaToolRunner<boolean>;
/** What the runner yields for each turn: its stream, or (without streaming) its pending reply. */
export type TurnItem = Runner extends AsyncIterable<infer T> ? T : never;
type Runnables = Awaited<ReturnType<typeof sessionTools>>;
/** What the turn loop does after a turn: go on with the runner, leave it (the run's next step), or end the run. */
export type TurnNext = 'continue' | 'break' | 'done' | 'again';

/** A turn as the model answered it: the reply and what is committed with it. */
export interface Replied {
  message: BetaMessage;
  reply: StoredMessage;
  calls: ReturnType<typeof toolCallsOf>;
  record: IterationRecord;
  /** Session fields that go with the reply's commit (thread, container). */
  carried: Record<string, string>;
  usageIncrs: Record<string, number>;
  /** The turn's events not written yet (stream relay leftovers), then `turn.completed`. */
  events: Array<[string, string]>;
}

export abstract class TurnRunner {
  protected readonly durations = new Map<string, number>();
  protected runnable: Runnables = new Map();
  protected tools: BetaToolRunnerParams['tools'] = [];
  /**
   * The tool changes of the history this runner sends, and those it is about to tell (`toldOf`): a history given at
   * create may hold tool changes (`system` messages) of another session's runs.
   */
  protected readonly toolChanges: HistoryChanges;
  protected params: SessionParams;
  protected paramsRev: number;
  /** Model turns of the session, this runner's included (a compaction is not one). */
  protected iteration: number;
  /** Iteration records of the session (turns and compactions), this runner's included: the last one's number. */
  protected records: number;
  /** The session's total tokens (policy `budget`): as stored at the start, plus each reply of this runner. */
  protected spent: Spent;
  /** The code-execution container the session's requests go on in (the SDK's runner adopts it from each reply). */
  protected container: string | null;
  protected runner!: Runner;
  protected compaction!: RunCompaction;
  /** The `system` of this runner's thread (JSON). */
  protected readonly threadSystem: string;
  /** Turns this runner sent (its own `max_iterations` counts them, dropped retries included). */
  protected runnerTurns = 0;
  /** The digest of the thread's messages, each reply's anchor (thread-anchor.ts), kept as the history grows. */
  private readonly threadDigest = new ThreadDigest();

  constructor(
    protected readonly deps: RunDeps,
    protected readonly run: RunHandle,
    protected readonly state: SessionState,
    protected readonly history: StoredMessage[],
    protected readonly log: EngineLogger,
  ) {
    this.toolChanges = historyChanges(history);
    this.params = state.params;
    this.paramsRev = state.paramsRev;
    this.iteration = state.iteration;
    this.records = recordCount(state);
    this.spent = spentOf(state);
    this.container = state.container;
    this.threadSystem = JSON.stringify(this.params.system);
  }

  /** Once tool changes are in the history (or about to be), their beta goes with every request. */
  protected withToolChanges(p: SessionParams): SessionParams {
    return withInlineToolsBeta(p, this.state, this.toolChanges);
  }

  /**
   * At most 4 cache breakpoints in what the model sees, the thread's stored history included (cache-breakpoints.ts),
   * and a tool change's message about to be appended (`change`: its definitions may carry markers of their own).
   */
  protected capMarks(change: ToolChange | null = null): void {
    const fixed = fixedMarks(this.params, this.tools);
    // The runner's message only: the service's own (a toolset's removal) has no markers, and is in the history.
    capCacheMarks(this.history, fixed + (change?.runner ? cacheMarks(change.runner) : 0));
  }

  protected runnerParamsNow(maxIterations: number, messages: StoredMessage[]) {
    return runnerParams({
      params: this.withToolChanges(this.params),
      messages,
      tools: this.tools,
      maxIterations,
      stream: this.state.stream,
      eager: runsToolsEagerly(this.state),
      container: this.container,
    });
  }

  /**
   * The runner, over the session's tools and history: compactions asked for and a pending tool change go first —
   * unless the history ends with a paused reply (`paused`), which must go back as the last message: as the SDK's
   * runner does, they wait until the turn that resumes it has ended (handOver, afterHandOver). With `compactOnly` (the
   * compaction the last run left, follow-ups waiting: run.ts `step`) the runner makes that compaction alone, over the
   * history as the last run left it; a tool change waits for the next runner (after the summary and the follow-ups),
   * as the SDK's runner, compacting right after its final turn, tells the model of a change made since with the next
   * request.
   */
  async start(budget: number, paused = false, compactOnly: DueCompaction | null = null): Promise<void> {
    const { deps, run, state, history } = this;
    // Resolved once per runner: an MCP server's tool list change is taken up by the next run.
    this.runnable = await sessionTools(deps, state);
    // After a PATCH of `tools`, runners still send the set at create as `tools` (src/engine/tools-change.ts).
    this.tools = await toolsToSend(deps, state, this.runnable, this.durations);
    const change = paused || compactOnly ? null : await pendingToolChange(deps, state, this.durations, true);
    toldOf(this.toolChanges, change);
    this.capMarks(change);
    // Over the session's message thread when it still holds the history (thread-anchor.ts).
    this.runner = startRunner(
      deps.client,
      this.runnerParamsNow(budget, history),
      // The SDK's own request option: its spans of this runner name the session as their conversation.
      { signal: run.controller.signal, openTelemetry: { conversationId: run.id } },
      state.thread,
    );
    // Compactions asked for (route, policy) run before the next turn: see compaction.ts.
    this.compaction = new RunCompaction(deps, run, state, this.runner);
    if (compactOnly) this.compaction.scheduleDue(compactOnly, history);
    else if (!paused) await this.compaction.atStart(history);
    // The service's own message of a change (an MCP toolset's removal) goes to the runner with the history.
    const handTo = () => this.runner.setMessagesParams(this.runnerParamsNow(budget, history));
    if (change)
      await applyToolChange(deps, run, this.runner, state, history, change, change.own ? handTo : undefined);
  }

  /** Sends the turn (the runner's request), relaying its stream; the reply with its record and usage. */
  protected async sendTurn(item: TurnItem): Promise<Replied> {
    const { deps, run, state, history } = this;
    const { store } = deps;
    const iteration = this.iteration;
    const startedAt = Date.now();
    const t0 = performance.now();
    run.obs.turnStarted(iteration, this.params);
    // The lines about this turn's model requests name it (src/observability/upstream-fetch.ts).
    const turn = upstreamContext.getStore();
    if (turn) {
      turn.iteration = iteration;
      turn.model = this.params.model;
    }
    let firstEventMs: number | null = null;
    const buffered: Array<[string, string]> = [
      eventOf('turn.started', { iteration, message_count: history.length }),
    ];
    let message: BetaMessage;
    if ('finalMessage' in item) {
      const relay = new StreamRelay(store, run.news, run.id, deps.streamBatchEvents, buffered);
      // The upstream body's reads wait while the relay is behind (backpressure; see StreamRelay).
      const ctx = upstreamContext.getStore();
      if (ctx) ctx.gate = () => relay.gate();
      holdUnsafeCalls(this.runner, item, state, this.runnable);
      item.on('streamEvent', (event: BetaRawMessageStreamEvent) => {
        if (firstEventMs === null) firstEventMs = Math.round(performance.now() - t0);
        // Not through `eventOf`: the hot path (one per streamed delta) splices the data's JSON around the SDK's
        // event, one `JSON.stringify` of it and no object built; the same bytes `eventOf('stream.event', …)` gives.
        relay.push(['stream.event', `{"iteration":${iteration},"event":${JSON.stringify(event)}}`]);
      });
      let ended = false;
      try {
        message = await item.finalMessage();
        ended = true;
      } catch (err) {
        this.billPartial(item.currentMessage);
        throw err;
      } finally {
        if (ctx) ctx.gate = undefined;
        buffered.length = 0;
        // Not `push(...rest)`: spreading a long array into arguments overflows the stack (RangeError).
        for (const ev of await relay.drain()) buffered.push(ev);
        run.obs.liveEventsDropped(relay.dropped, 'buffer_full');
        // A turn without its reply (an upstream error event at once, a cut stream, a cancel) has no commit to carry
        // what the relay still held: it is live news, so the log has what the stream sent before its end, whatever
        // the timing, and the commit that ends or drops the turn waits for it (commit.ts) and comes after it.
        if (!ended) run.news.send(buffered.splice(0));
      }
    } else {
      // Live news, like the stream relay's writes: written as the request goes, through a store outage (the turn's
      // commit waits for it).
      run.news.send(buffered.splice(0));
      // Without streaming the runner yields the turn's pending reply.
      message = await item;
    }
    const upstreamMs = Math.round(performance.now() - t0);
    return this.replied(message, buffered, startedAt, {
      upstream_ms: upstreamMs,
      first_event_ms: firstEventMs,
    });
  }

  /**
   * A turn that ended without its reply (a cancel, an interrupt, a cut stream, an error event mid-stream) was billed
   * for what it streamed: its usage so far — the input and cache tokens of `message_start`, exact; the output tokens
   * of the last usage the stream gave, a floor — is counted in the run's spend now and in the session's with the
   * run's next commit (RunHandle `unbilled`), so dropping turns never escapes a budget or the tenant's daily cap.
   */
  private billPartial(snapshot: BetaMessage | undefined): void {
    if (!snapshot) return;
    const { deps, run, state, params } = this;
    const usage = withCompactionUsage(snapshot.usage);
    const costMicros = deps.store.spend.prices.replyCost(params.model, snapshot.model, usage);
    const incr = usageIncr(usage, costMicros);
    countSpend(deps, state.tenant, params.model, incr);
    addSpent(this.spent, recordedUsage({ ...snapshot, usage }, costMicros));
    run.bill(incr);
  }

  /** The reply's record, usage (counted here, once per turn) and carried fields. */
  protected replied(
    message: BetaMessage,
    buffered: Array<[string, string]>,
    startedAt: number,
    timings: { upstream_ms: number; first_event_ms: number | null },
  ): Replied {
    const { deps, state, history, params, iteration } = this;
    // Counted once per turn, with its usage, in the commit that stores the turn (or drops it: it was billed); a
    // server-side compaction's tokens, which the API leaves out of the top-level fields, included.
    const usage = withCompactionUsage(message.usage);
    // Each part at the price of the model that served it: a fallback model's reply is priced as that model.
    const costMicros = deps.store.spend.prices.replyCost(params.model, message.model, usage);
    const usageIncrs = usageIncr(usage, costMicros);
    countSpend(deps, state.tenant, params.model, usageIncrs);
    const recorded = recordedUsage(usage === message.usage ? message : { ...message, usage }, costMicros);
    addSpent(this.spent, recorded);
    // A reply that ends its turn keeps no call the API never ran (a turn paused mid-call is resumed instead).
    const content = isUnfinished(message.stop_reason) ? message.content : withoutOpenCalls(message.content);
    const reply: StoredMessage = { role: 'assistant', content: storedReplyContent(content) };
    const calls = toolCallsOf(reply);
    // Persisted with the reply: the container it ran in, the thread it ends (thread-anchor.ts).
    if (message.container?.id) this.container = message.container.id;
    // A reply stored otherwise than the API holds it (a cut call, empty text left out), or one that said nothing
    // (never sent again), ends the thread there. The anchor counts the messages as requests carry them (`sendable`:
    // without earlier replies that said nothing), which is what the next run's runner is given.
    const anchor =
      reply.content === message.content && message.content.length > 0
        ? anchorOf(message, sendable([...history, reply]), params.system, this.tools, this.threadDigest)
        : null;
    const carried: Record<string, string> = {
      thread: anchor ? JSON.stringify(anchor) : '',
      ...(this.container !== state.container ? { container: this.container ?? '' } : {}),
    };
    const record: IterationRecord = {
      n: this.records,
      iteration,
      reply_index: state.msgBase + history.length,
      results_index: null,
      request: {
        model: params.model,
        max_tokens: params.max_tokens,
        message_count: history.length,
        params_rev: this.paramsRev,
      },
      stop_reason: message.stop_reason,
      usage: recorded,
      tool_calls: calls.map(({ id, name }) => ({ id, name })),
      started_at: new Date(startedAt).toISOString(),
      completed_at: new Date().toISOString(),
      timings: { ...timings, tools_ms: null },
    };
    this.run.obs.turnReplied(message, record.timings);
    const completed = eventOf('turn.completed', { iteration, message, usage: record.usage });
    return { message, reply, calls, record, carried, usageIncrs, events: [...buffered, completed] };
  }

  /**
   * Hands the runner the committed history for the next turn, with the params and policies a PATCH may have
   * changed since (seen through `params_rev` in the commit's answer, or the `ctl` channel). False when this runner
   * sends no next turn: the budget is spent (the run's next step stops the run), or `system` changed (the next step
   * builds a new runner).
   */
  protected async handOver(storedRev: number): Promise<boolean> {
    const { deps, run, state } = this;
    if (run.paramsDirty || storedRev !== this.paramsRev) await this.takeUpChanges();
    // The budget or the tenant's daily cap spent: no next request from this runner; the run's next step stops the run.
    if (await this.spentOut()) return false;
    // A thread keeps the `system` it was created with (the SDK throws on a change): a new `system` ends this runner,
    // and the next one starts a new thread with it.
    if (JSON.stringify(this.params.system) !== this.threadSystem) return false;
    // A PATCH of `tools`: told to the model ahead of the next turn; the runner gets the history without that message,
    // which it appends itself.
    const change = await pendingToolChange(deps, state, this.durations, false);
    toldOf(this.toolChanges, change);
    const handTo = () => {
      this.capMarks(change);
      const max = this.runnerTurns + Math.max(1, budgetLeft(state, this.iteration));
      this.runner.setMessagesParams(this.runnerParamsNow(max, [...this.history]));
    };
    if (change) {
      // The tools the calls of the next turns are looked up in (approval, idempotency, review): a tool added now is
      // asked about like one given at create (not run as an unknown server call), one removed is "not found".
      this.runnable = await sessionTools(deps, state);
      await applyToolChange(deps, run, this.runner, state, this.history, change, handTo);
    } else handTo();
    return true;
  }

  /**
   * Whether the session's budget or its tenant's daily cap is spent: checked before every model request. A model
   * without a price under a dollar ceiling (a PATCH of the model on a replica without the tenant's cap) stops this
   * runner too, and the run's next step fails the run (run.ts).
   */
  protected async spentOut(): Promise<boolean> {
    const { state, deps } = this;
    return (
      budgetExhausted(state.budget, this.spent) ||
      unpricedError(deps.store.spend, this.params, state.budget) !== null ||
      deps.store.spend.overCap(state.tenant)
    );
  }

  /** A PATCH changed the session since this runner read it: the fields a live runner takes up, read again. */
  protected async takeUpChanges(): Promise<void> {
    const fresh = await this.deps.store.load(this.run.id);
    if (fresh) {
      this.params = fresh.params;
      this.paramsRev = fresh.paramsRev;
      this.spent = spentOf(fresh);
      for (const key of LIVE_FIELDS) takeUp(this.state, fresh, key);
    }
    this.run.paramsDirty = false;
  }
}
