import Anthropic, { APIError, APIUserAbortError, AnthropicError } from '@anthropic-ai/sdk';
import type {
  BetaMessage,
  BetaRawMessageStreamEvent,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { runRunnableTool, type BetaRunnableTool } from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import type { Logger } from 'pino';
import type { Redis, Cluster } from 'ioredis';
import type { ServerTool } from '../../tools/types.js';
import { AppError, FencedOut } from '../errors.js';
import { blocksOf, pendingToolCalls, toolCallsOf, type StoredMessage } from '../history.js';
import { randomBytes } from 'node:crypto';
import { controlChannel, sessionKeys } from '../store/keys.js';
import { isStoreDown } from '../store/unavailable.js';
import {
  usageIncr,
  type ApplyOps,
  type ApplyResult,
  type IterationRecord,
  type PendingCall,
  type PendingStep,
  type SessionError,
  type SessionState,
  type SessionStore,
  type ToolResult,
} from '../store/store.js';
import { statusEvent } from '../sessions/view.js';
import { count } from '../metrics.js';
import {
  clientToolNames,
  interruptedResult,
  needsReview,
  pendingCalls,
  resultBlock,
  serverToolNames,
} from './policy.js';

/** Why a run's AbortController fired. */
type AbortReason = 'cancel' | 'interrupt' | 'shutdown' | 'fenced' | 'deleted';

interface RunHandle {
  id: string;
  fence: number;
  controller: AbortController;
  reason: AbortReason | null;
  paramsDirty: boolean;
  done: Promise<void>;
}

export interface EngineOptions {
  store: SessionStore;
  client: Anthropic;
  /** A connection the engine may put in subscriber mode (control messages). */
  subscriber: Redis | Cluster;
  serverTools: ReadonlyMap<string, ServerTool>;
  logger: Logger;
  owner: string;
  /** Run lease TTL (ms); renewed every third of it. A crashed owner's runs are claimed after at most this. */
  leaseTtlMs: number;
  /** How often each replica looks for runs whose lease expired (ms). */
  sweepIntervalMs?: number;
  /** Stream deltas are written to Redis as they arrive, at most this many per pipelined batch. */
  streamBatchEvents?: number;
  /**
   * Most runs this process drives at once (MAX_ACTIVE_RUNS). Runs kicked beyond it wait for a slot, oldest first,
   * in a short list of ids here and, durably, in `runs:due`, where any replica with room claims them once due.
   */
  maxActiveRuns?: number;
}

/** Runs waiting here for a slot (ids only; `runs:due` is their durable record, which any replica sweeps). */
const MAX_WAITING = 10_000;

const STOP_REASONS_THAT_END = new Set(['end_turn', 'stop_sequence', 'max_tokens', 'refusal']);
/** Our own retries of a turn whose stream was cut after it started (the SDK retries only before it starts). */
const STREAM_CUT_RETRIES = 2;

/**
 * Runs sessions: one run per session at a time across all processes (lease + fencing token), each run driven by a
 * fresh SDK tool runner built from the persisted history, every iteration committed to Redis before the next turn.
 */
export class Engine {
  private readonly active = new Map<string, RunHandle>();
  private readonly rekick = new Set<string>();
  /** Runs kicked while this process was at its admission limit, oldest first. */
  private readonly waiting = new Set<string>();
  /** Claims in flight (lease requested, run not started): they count against the limit. */
  private claiming = 0;
  private stopping = false;
  private sweepTimer: NodeJS.Timeout | null = null;
  private readonly o: Required<EngineOptions>;

  constructor(options: EngineOptions) {
    this.o = { sweepIntervalMs: 1000, streamBatchEvents: 256, maxActiveRuns: 5000, ...options };
    this.o.subscriber.on('message', (channel: string, message: string) => {
      const id = /^ctl:\{(.+)\}$/.exec(channel)?.[1];
      const run = id ? this.active.get(id) : undefined;
      if (!run) return;
      if (message === 'params') run.paramsDirty = true;
      else if (message === 'cancel' || message === 'interrupt') this.abort(run, message);
      else if (message === 'delete') this.abort(run, 'deleted');
    });
  }

  get store() {
    return this.o.store;
  }

  get activeRuns(): number {
    return this.active.size;
  }

  /** Runs waiting in this process for an admission slot. */
  get waitingRuns(): number {
    return this.waiting.size;
  }

  isRunningHere(id: string): boolean {
    return this.active.has(id);
  }

  start(): void {
    const sweep = () => {
      this.sweep()
        .catch((err) => this.o.logger.warn({ err }, 'sweep failed'))
        .finally(() => {
          if (!this.stopping) this.sweepTimer = setTimeout(sweep, this.o.sweepIntervalMs);
        });
    };
    this.sweepTimer = setTimeout(sweep, 50);
  }

  /** Claims runs whose owner is gone (crash, lost lease): every replica does this, the lease picks one. */
  private async sweep(): Promise<void> {
    if (this.stopping) return;
    const due = await this.o.store.dueRuns(Date.now(), 20);
    for (const id of due) {
      if (this.active.has(id)) continue;
      const state = await this.o.store.load(id);
      if (!state || state.status !== 'running') {
        await this.o.store.unmarkDue(id);
        continue;
      }
      this.kick(id);
    }
  }

  /** Tries to take the run of a `running` session in this process. Returns at once; the run goes on in the background. */
  kick(id: string): void {
    if (this.stopping) return;
    if (this.active.has(id)) {
      // The run here is finishing (its last commit released the lease); claim again once it has returned.
      this.rekick.add(id);
      return;
    }
    if (this.active.size + this.claiming >= this.o.maxActiveRuns || this.waiting.size > 0) {
      // At the limit (or others wait already, first come first served): wait for a slot. Should this process
      // die meanwhile, the run is still due in `runs:due`.
      if (this.waiting.size < MAX_WAITING) this.waiting.add(id);
      this.admitWaiting();
      return;
    }
    this.startClaim(id);
  }

  private startClaim(id: string): void {
    this.claiming++;
    void this.claim(id)
      .catch((err) => this.o.logger.error({ err, sessionId: id }, 'claim failed'))
      .finally(() => {
        this.claiming--;
        this.admitWaiting();
      });
  }

  /** Claims waiting runs, oldest first, while there are slots. */
  private admitWaiting(): void {
    if (this.stopping) return;
    for (const id of this.waiting) {
      if (this.active.size + this.claiming >= this.o.maxActiveRuns) return;
      this.waiting.delete(id);
      if (this.active.has(id)) this.rekick.add(id);
      else this.startClaim(id);
    }
  }

  private async claim(id: string): Promise<void> {
    const fence = await this.o.store.acquire(id, this.o.owner, this.o.leaseTtlMs);
    if (!fence) return;
    if (this.stopping || this.active.has(id)) {
      await this.o.store.release(id, this.o.owner, fence);
      return;
    }
    const run: RunHandle = {
      id,
      fence,
      controller: new AbortController(),
      reason: null,
      paramsDirty: false,
      done: Promise.resolve(),
    };
    this.active.set(id, run);
    count('trs_runs_started_total');
    run.done = this.drive(run).finally(() => {
      this.active.delete(id);
      if (this.rekick.delete(id)) this.kick(id);
      this.admitWaiting();
    });
  }

  /** Stops taking runs, lets running ones finish for `graceMs`, then aborts the rest and hands them to other replicas. */
  async stop(graceMs: number): Promise<void> {
    this.stopping = true;
    if (this.sweepTimer) clearTimeout(this.sweepTimer);
    // Waiting runs stay due in `runs:due`: other replicas claim them.
    this.waiting.clear();
    const runs = [...this.active.values()];
    const all = Promise.allSettled(runs.map((r) => r.done));
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      all.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), graceMs))),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      for (const r of this.active.values()) this.abort(r, 'shutdown');
      await Promise.allSettled([...this.active.values()].map((r) => r.done));
    }
  }

  private abort(run: RunHandle, reason: AbortReason): void {
    if (run.reason && run.reason !== 'interrupt') return;
    run.reason = reason;
    run.controller.abort(reason);
  }

  /** The run: tool steps and runner turns until the session leaves `running` or this process loses it. */
  private async drive(run: RunHandle): Promise<void> {
    const { store, leaseTtlMs, owner, logger } = this.o;
    const log = logger.child({ sessionId: run.id });
    const renew = setInterval(
      () => {
        Promise.all([
          store.renew(run.id, owner, run.fence, leaseTtlMs),
          store.markDue(run.id, Date.now() + leaseTtlMs),
        ])
          .then(([ok]) => {
            if (!ok) this.abort(run, 'fenced');
          })
          .catch((err) => log.warn({ err }, 'lease renewal failed'));
      },
      Math.floor(leaseTtlMs / 3),
    );
    await this.o.subscriber
      .subscribe(controlChannel(run.id))
      .catch((err) => log.warn({ err }, 'subscribe failed'));
    let cutRetries = 0;
    try {
      await store.markDue(run.id, Date.now() + leaseTtlMs);
      while (!this.stopping || run.reason === null) {
        const state = await store.load(run.id);
        if (!state || state.status !== 'running' || state.fence !== run.fence) return;
        if (state.control === 'cancel' || run.reason === 'cancel') {
          await this.finishCancel(run, state);
          return;
        }
        if (run.reason === 'shutdown' || run.reason === 'fenced' || run.reason === 'deleted') return;
        // A fresh controller for each runner: an interrupt aborts one turn, not the run.
        if (run.controller.signal.aborted) {
          run.controller = new AbortController();
          run.reason = null;
        }
        try {
          const next = await this.step(run, state, log);
          cutRetries = 0;
          if (next === 'done') return;
        } catch (err) {
          if (err instanceof FencedOut) return;
          if (isAbort(err, run)) {
            if (run.reason === 'interrupt') {
              await this.commitInterrupt(run);
              continue;
            }
            if (run.reason === 'cancel') continue; // the loop's top finishes the cancel
            return;
          }
          // A commit that the store turned out to have applied after all: go on from what it holds.
          if (err instanceof CommitLanded) continue;
          // The store stayed unreachable longer than a commit waits: leave the run for recovery (the session is
          // still `running` and due), rather than failing the session for a Redis outage.
          if (isStoreDown(err)) throw err;
          if (isStreamCut(err) && cutRetries < STREAM_CUT_RETRIES) {
            cutRetries++;
            log.warn({ err, attempt: cutRetries }, 'stream cut mid-turn; sending the turn again');
            continue;
          }
          await this.fail(run, upstreamError(err), log);
          return;
        }
      }
    } catch (err) {
      if (!(err instanceof FencedOut)) log.error({ err }, 'run crashed; the session is left for recovery');
    } finally {
      clearInterval(renew);
      await this.o.subscriber.unsubscribe(controlChannel(run.id)).catch(() => {});
      if (run.reason === 'shutdown') {
        // Handed over: any replica may claim it now rather than after the lease TTL.
        await store.release(run.id, owner, run.fence).catch(() => {});
        await store.markDue(run.id, Date.now()).catch(() => {});
      } else {
        await store.release(run.id, owner, run.fence).catch(() => {});
      }
    }
  }

  /** One step of a run: answer a pending tool step, or run the SDK's runner until it stops or needs a client. */
  private async step(run: RunHandle, state: SessionState, log: Logger): Promise<'done' | 'again'> {
    const { store } = this.o;
    const history = await store.history(run.id);
    if (pendingToolCalls(history).length > 0) return this.toolStep(run, state, history);

    const queued = await store.queueLength(run.id);
    const last = history.at(-1);
    if (queued > 0) {
      // Follow-ups become a user turn: merged onto a trailing user turn, or a new one after an assistant turn.
      const into = last?.role === 'user';
      await this.commit(run, {
        queue: { ...(into ? { into_last: true } : {}) },
      });
      return 'again';
    }
    if (!last || last.role === 'assistant') {
      // Nothing to send: the run is over.
      await this.finish(run, state, state.stopReason ?? 'end_turn');
      return 'done';
    }
    const budget = state.maxIterations - (state.iteration - state.runStart);
    if (budget <= 0) {
      await this.finish(run, state, 'max_iterations');
      return 'done';
    }
    return this.runTurns(run, state, history, budget, log);
  }

  private runnableTools(state: SessionState, durations: Map<string, number>): BetaRunnableTool<any>[] {
    const allowed = serverToolNames(state);
    const out: BetaRunnableTool<any>[] = [];
    for (const name of allowed) {
      const t = this.o.serverTools.get(name);
      if (!t) continue;
      const tool = t.tool;
      out.push({
        ...tool,
        run: async (args: any, ctx?: any) => {
          const t0 = performance.now();
          try {
            return await tool.run(args, ctx);
          } finally {
            if (ctx?.toolUse?.id) durations.set(ctx.toolUse.id, Math.round(performance.now() - t0));
          }
        },
      } as BetaRunnableTool<any>);
    }
    for (const t of state.tools) {
      if (typeof t !== 'string') out.push(t as unknown as BetaRunnableTool<any>);
    }
    return out;
  }

  /** Drives one SDK tool runner over the persisted history, committing each iteration. */
  private async runTurns(
    run: RunHandle,
    state: SessionState,
    history: StoredMessage[],
    budget: number,
    log: Logger,
  ): Promise<'done' | 'again'> {
    const durations = new Map<string, number>();
    const tools = this.runnableTools(state, durations);
    let params = state.params;
    let paramsRev = state.paramsRev;
    let iteration = state.iteration;
    const runner = this.o.client.beta.messages.toolRunner(
      {
        ...(params as any),
        messages: history as any,
        ...(tools.length ? { tools } : {}),
        max_iterations: budget,
        stream: state.stream,
        // Redis is the source of truth and every run starts a new runner (possibly on another replica), so a
        // server-side thread anchor would live only in one process's memory and be replayed after any edit,
        // interrupt, crash or handover. The full history is sent each turn. See docs/ARCHITECTURE.md.
        thread: false,
      } as any,
      { signal: run.controller.signal },
    );

    /** Turns this runner sent (its own `max_iterations` counts them, dropped retries included). */
    let runnerTurns = 0;
    /**
     * Hands the runner the committed history for the next turn, with the params and policies a PATCH may have
     * changed since (seen through `params_rev` in the commit's answer, or the `ctl` channel).
     */
    const handOver = async (storedRev: number) => {
      if (run.paramsDirty || storedRev !== paramsRev) {
        const fresh = await this.o.store.load(run.id);
        if (fresh) {
          params = fresh.params;
          paramsRev = fresh.paramsRev;
          const { review, approval, onToolError, onMaxTokens, cacheToolResults, maxIterations, stream } =
            fresh;
          Object.assign(state, {
            review,
            approval,
            onToolError,
            onMaxTokens,
            cacheToolResults,
            maxIterations,
            stream,
          });
        }
        run.paramsDirty = false;
      }
      runner.setMessagesParams({
        ...(params as any),
        messages: [...history],
        ...(tools.length ? { tools } : {}),
        max_iterations: runnerTurns + Math.max(1, this.budgetLeft(state, iteration)),
        stream: state.stream,
      } as any);
    };

    for await (const item of runner as AsyncIterable<any>) {
      runnerTurns++;
      iteration++;
      const startedAt = Date.now();
      const t0 = performance.now();
      let firstEventMs: number | null = null;
      const buffered: Array<[string, string]> = [
        ['turn.started', JSON.stringify({ iteration, message_count: history.length })],
      ];
      let message: BetaMessage;
      if (state.stream) {
        const relay = new StreamRelay(this.o.store, run.id, this.o.streamBatchEvents, buffered);
        item.on('streamEvent', (event: BetaRawMessageStreamEvent) => {
          if (firstEventMs === null) firstEventMs = Math.round(performance.now() - t0);
          relay.push(['stream.event', `{"iteration":${iteration},"event":${JSON.stringify(event)}}`]);
        });
        try {
          message = await item.finalMessage();
        } finally {
          buffered.length = 0;
          buffered.push(...(await relay.drain()));
        }
      } else {
        // Live news only, like the stream relay's writes: a store outage here must not cost the turn, whose
        // request is already on its way (its commit rides the outage out).
        await this.o.store.appendEvents(run.id, buffered.splice(0)).catch(() => {});
        message = await item;
      }
      const upstreamMs = Math.round(performance.now() - t0);
      count('trs_turns_total', `{stop_reason="${message.stop_reason ?? 'none'}"}`);
      const reply: StoredMessage = { role: 'assistant', content: message.content as any };
      const calls = toolCallsOf(reply);
      const record: IterationRecord = {
        iteration,
        reply_index: history.length,
        results_index: null,
        request: {
          model: String(params.model),
          max_tokens: Number(params.max_tokens),
          message_count: history.length,
          params_rev: paramsRev,
        },
        stop_reason: message.stop_reason,
        usage: {
          input_tokens: message.usage?.input_tokens ?? 0,
          output_tokens: message.usage?.output_tokens ?? 0,
          cache_creation_input_tokens: message.usage?.cache_creation_input_tokens ?? 0,
          cache_read_input_tokens: message.usage?.cache_read_input_tokens ?? 0,
        },
        tool_calls: calls.map(({ id, name }) => ({ id, name })),
        started_at: new Date(startedAt).toISOString(),
        completed_at: new Date().toISOString(),
        timings: { upstream_ms: upstreamMs, first_event_ms: firstEventMs, tools_ms: null },
      };
      const completedEvent: [string, string] = ['turn.completed', JSON.stringify({ iteration, message })];

      // on_max_tokens: retry the cut turn with twice the budget, up to the ceiling; the cut reply is dropped.
      const omt = state.onMaxTokens;
      if (message.stop_reason === 'max_tokens' && omt !== 'stop' && Number(params.max_tokens) < omt.ceiling) {
        const bigger = Math.min(Number(params.max_tokens) * 2, omt.ceiling);
        params = { ...params, max_tokens: bigger };
        iteration--;
        log.info(
          { iteration, max_tokens: bigger },
          'reply cut at max_tokens; sending the turn again with a bigger budget',
        );
        const res = await this.commit(run, {
          hset: { params: JSON.stringify(params) },
          hincr: { params_rev: 1, ...usageIncr(message.usage as any) },
          events: [
            ...buffered,
            completedEvent,
            ['turn.dropped', JSON.stringify({ iteration: iteration + 1, reason: 'max_tokens_retry' })],
            [
              'params.updated',
              JSON.stringify({ params: { max_tokens: bigger }, reason: 'max_tokens_retry' }),
            ],
          ],
        });
        paramsRev = res.paramsRev;
        runner.setMessagesParams({
          ...runner.params,
          max_tokens: bigger,
          max_iterations: runnerTurns + Math.max(1, this.budgetLeft(state, iteration)),
        } as any);
        continue;
      }

      const stops = STOP_REASONS_THAT_END.has(message.stop_reason ?? '') || calls.length === 0;
      if (stops) {
        const ends = message.stop_reason !== 'pause_turn';
        const stopReason = message.stop_reason ?? 'end_turn';
        const idle = { status: 'idle' as const, pending: null, stopReason, error: null };
        // Calls of a reply that stopped for another reason (cut at max_tokens, say) are not run — their input may be
        // cut off — but answered at once, so no unanswered tool_use is ever left in the history.
        const unrun = calls.map((c) =>
          resultBlock(c.id, interruptedResult(`not run: the reply stopped with ${stopReason}`), false),
        );
        const res = await this.commit(run, {
          push_msgs: [JSON.stringify(reply)],
          push_iters: [JSON.stringify(record)],
          hincr: { iteration: 1, ...usageIncr(message.usage as any) },
          events: [
            ...buffered,
            completedEvent,
            ['iteration.persisted', JSON.stringify({ iteration, revision: null }), 'rev'],
          ],
          ...(ends
            ? {
                queue: {
                  ...(unrun.length ? { base: JSON.stringify(unrun).slice(1, -1) } : {}),
                  none: {
                    hset: { status: 'idle', stop_reason: stopReason, pending: '', error: '', control: '' },
                    release_lease: true,
                    events: [['session.status', statusEvent(idle)]],
                  },
                },
              }
            : {}),
        });
        history.push(reply);
        if (!ends) continue; // pause_turn: the runner resumes the turn
        if (res.merged) history.push(JSON.parse(res.merged) as StoredMessage);
        if (res.mergedCount === 0) {
          await this.o.store.unmarkDue(run.id);
          return 'done';
        }
        if (this.budgetLeft(state, iteration) <= 0) return 'again';
        await handOver(res.paramsRev);
        continue;
      }

      // The reply calls tools. Calls that wait for a client (approval, client tools) end this runner: the reply is
      // committed with its pending step, and the next step answers it.
      const pending = pendingCalls(state, calls, this.o.serverTools);
      const waits = pending.some((c) => c.approval === 'required' || c.kind === 'client');
      const autoServer = pending.filter((c) => c.kind === 'server' && c.approval === 'auto');
      for (const c of autoServer) if (!waits) c.started = true;
      const step: PendingStep = { calls: pending, review: false, iteration };
      const started = waits
        ? []
        : autoServer.map((c): [string, string] => [
            'tool.started',
            JSON.stringify({ tool_use_id: c.id, name: c.name, input: c.input }),
          ]);
      const replyOps: ApplyOps = {
        push_msgs: [JSON.stringify(reply)],
        hincr: { iteration: 1, ...usageIncr(message.usage as any) },
        events: [...buffered, completedEvent, ...started],
      };
      // One round trip per iteration when every call is to an idempotent server tool: the reply is committed with
      // its results. A crash while they run loses the reply, and the turn is sent again — which may run those tools
      // again, harmless as they are idempotent. Otherwise the reply (with its calls marked started) is committed
      // first, so a non-idempotent call interrupted by a crash is answered "interrupted" instead of running twice.
      const oneCommit = !waits && pending.every((c) => this.o.serverTools.get(c.name)?.idempotent ?? true);
      if (oneCommit) {
        // Live clients still see the turn end and the tools start now; these events change no session field.
        void this.o.store.appendEvents(run.id, replyOps.events as Array<[string, string]>).catch(() => {});
        replyOps.events = [];
      } else {
        await this.commit(run, {
          ...replyOps,
          push_iters: [JSON.stringify(record)],
          hset: { pending: JSON.stringify(step) },
        });
      }
      history.push(reply);
      if (waits) return 'again';

      const toolsT0 = performance.now();
      const toolMessage = await runner.generateToolResponse();
      record.timings.tools_ms = Math.round(performance.now() - toolsT0);
      // Tools cut short by a shutdown are not answered here: the pending step keeps them `started`, and the replica
      // that resumes the run runs the idempotent ones again and answers the others "interrupted".
      if (run.reason === 'shutdown') throw new APIUserAbortError();
      const blocks = (toolMessage?.content ?? []) as Array<Record<string, any>>;
      for (const c of pending) {
        const b = blocks.find((x) => x.tool_use_id === c.id);
        c.result = b
          ? { content: b.content ?? '', is_error: b.is_error === true }
          : interruptedResult('no result');
      }
      const { outcome, paramsRev: storedRev } = await this.afterTools(
        run,
        state,
        history,
        step,
        record,
        durations,
        oneCommit ? replyOps : null,
      );
      if (outcome !== 'continue') return outcome === 'done' ? 'done' : 'again';
      // What was committed is what the runner sends next: our history, with the results (and any follow-ups).
      if (this.budgetLeft(state, iteration) <= 0) break;
      await handOver(storedRev);
    }
    return 'again';
  }

  private budgetLeft(state: SessionState, iteration: number): number {
    return state.maxIterations - (iteration - state.runStart);
  }

  /**
   * All results of the pending step are known: pause for review or on a tool error if the policy says so, else
   * commit them as the next user turn (with any queued follow-ups after them, the SDK's order).
   */
  private async afterTools(
    run: RunHandle,
    state: SessionState,
    history: StoredMessage[],
    step: PendingStep,
    record: IterationRecord | null,
    durations: Map<string, number>,
    /** The reply's own ops when it is not committed yet (one commit per iteration): they join this commit. */
    replyOps: ApplyOps | null = null,
  ): Promise<{ outcome: 'continue' | 'paused' | 'done'; paramsRev: number }> {
    // An uncommitted reply carries its iteration record in full; a committed one gets its results index set.
    const withReply = (ops: ApplyOps): ApplyOps =>
      replyOps && record ? mergeOps({ ...replyOps, push_iters: [JSON.stringify(record)] }, ops) : ops;
    const completed = completedEvents(step.calls, durations);
    const serverResults = step.calls.filter((c) => c.kind === 'server' && c.approval !== 'denied');
    const failed = serverResults.filter((c) => c.result?.is_error);
    // `step.review` marks results a client accepted (continue, or a message after a failure): they go as they are.
    if (failed.length > 0 && state.onToolError === 'fail' && !step.review) {
      const error: SessionError = {
        code: 'tool_failed',
        message: `Tool ${failed.map((c) => c.name).join(', ')} failed: ${String(textOf(failed[0]!.result!.content)).slice(0, 500)}`,
        retryable: true,
      };
      await this.endRun(
        run,
        { status: 'failed', pending: step, error },
        [...completed, ['session.error', JSON.stringify(error)]],
        withReply({}),
      );
      return { outcome: 'done', paramsRev: state.paramsRev };
    }
    const review =
      !step.review &&
      (needsReview(state, serverResults) || (failed.length > 0 && state.onToolError === 'pause'));
    if (review) {
      step.review = true;
      await this.endRun(run, { status: 'requires_action', pending: step }, completed, withReply({}));
      return { outcome: 'paused', paramsRev: state.paramsRev };
    }
    const cache = state.cacheToolResults;
    const results = step.calls.map((c, i) =>
      resultBlock(c.id, c.result ?? interruptedResult('no result'), cache && i === step.calls.length - 1),
    );
    const base = JSON.stringify(results).slice(1, -1);
    const ops: ApplyOps = {
      hset: { pending: '' },
      events: [
        ...completed,
        ['iteration.persisted', JSON.stringify({ iteration: step.iteration, revision: null }), 'rev'],
      ],
      queue: { base },
    };
    // One cache breakpoint on tool results at a time: the previous results turn loses its marker.
    if (cache) {
      const prev = findLastIndex(
        history,
        (m) => m.role === 'user' && blocksOf(m).some((b) => b.cache_control),
      );
      if (prev >= 0) {
        const m = history[prev]!;
        const stripped = { ...m, content: blocksOf(m).map(({ cache_control: _c, ...b }) => b) };
        history[prev] = stripped;
        ops.lset_msgs = [[prev, JSON.stringify(stripped)]];
      }
    }
    if (record) {
      record.results_index = history.length;
      if (!replyOps) ops.lset_iters = [[record.iteration - 1, JSON.stringify(record)]];
    } else {
      // A tool step of an earlier runner: fill in the record's results index.
      const recs = await this.o.store.iterationRecords(run.id, step.iteration - 1, step.iteration - 1);
      const rec = recs[0];
      if (rec && rec.iteration === step.iteration) {
        rec.results_index = history.length;
        ops.lset_iters = [[step.iteration - 1, JSON.stringify(rec)]];
      }
    }
    const res = await this.commit(run, withReply(ops));
    history.push(JSON.parse(res.merged) as StoredMessage);
    return { outcome: 'continue', paramsRev: res.paramsRev };
  }

  /**
   * The history ends with an assistant turn whose calls are not answered: work out their results. Server calls that
   * need no decision run (a started call of a crashed run again only if idempotent); denied calls get the reason;
   * client calls and undecided approvals send the session to `requires_action`.
   */
  private async toolStep(
    run: RunHandle,
    state: SessionState,
    history: StoredMessage[],
  ): Promise<'done' | 'again'> {
    const calls = pendingToolCalls(history);
    const step: PendingStep = state.pending ?? {
      calls: pendingCalls(state, calls, this.o.serverTools),
      review: false,
      iteration: state.iteration,
    };
    const durations = new Map<string, number>();
    const toRun: PendingCall[] = [];
    for (const c of step.calls) {
      if (c.result) continue;
      if (c.approval === 'denied') {
        c.result = { content: `Tool call denied${c.reason ? `: ${c.reason}` : '.'}`, is_error: true };
      } else if (c.kind === 'server' && c.approval !== 'required') {
        if (c.started && !this.o.serverTools.get(c.name)?.idempotent) {
          c.result = interruptedResult(`the run was interrupted while ${c.name} ran; it was not run again`);
        } else {
          toRun.push(c);
        }
      }
    }
    if (toRun.length > 0) {
      for (const c of toRun) c.started = true;
      await this.commit(run, {
        hset: { pending: JSON.stringify(step) },
        events: toRun.map((c): [string, string] => [
          'tool.started',
          JSON.stringify({ tool_use_id: c.id, name: c.name, input: c.input }),
        ]),
      });
      const tools = new Map(this.runnableTools(state, durations).map((t) => [(t as any).name as string, t]));
      const allowed = serverToolNames(state);
      await Promise.all(
        toRun.map(async (c) => {
          const tool = allowed.has(c.name) ? tools.get(c.name) : undefined;
          const toolUse = { type: 'tool_use' as const, id: c.id, name: c.name, input: c.input };
          if (!tool || !('run' in tool)) {
            c.result = { content: `Error: Tool '${c.name}' not found`, is_error: true };
            return;
          }
          const out = await runRunnableTool(tool, c.input, {
            toolUse: toolUse as any,
            toolUseBlock: toolUse as any,
            signal: run.controller.signal,
          });
          c.result = { content: out.content as ToolResult['content'], is_error: out.isError };
        }),
      );
      // As in runTurns: tools cut short by a shutdown are left `started` for the replica that resumes the run.
      if (run.reason === 'shutdown') throw new APIUserAbortError();
    }
    const waiting = step.calls.some((c) => c.approval === 'required' || (c.kind === 'client' && !c.result));
    if (waiting) {
      await this.endRun(
        run,
        { status: 'requires_action', pending: step },
        completedEvents(step.calls, durations),
      );
      return 'done';
    }
    const { outcome } = await this.afterTools(run, state, history, step, null, durations);
    return outcome === 'continue' ? 'again' : 'done';
  }

  /** Idle with `stop_reason`, releasing the lease, unless follow-ups are queued (then the loop merges them). */
  private async finish(run: RunHandle, state: SessionState, stopReason: string): Promise<void> {
    const idle = { status: 'idle' as const, pending: null, stopReason, error: null };
    const res = await this.commit(run, {
      queue: {
        none: {
          hset: { status: 'idle', stop_reason: stopReason, pending: '', error: '', control: '' },
          release_lease: true,
          events: [['session.status', statusEvent(idle)]],
        },
        ...(state.msgCount > 0 && (await this.o.store.lastMessage(run.id))?.role === 'user'
          ? { into_last: true }
          : {}),
      },
    });
    if (res.mergedCount === 0) await this.o.store.unmarkDue(run.id);
  }

  /** An interrupt aborted the turn in flight: its partial reply is dropped, the follow-ups join the last user turn. */
  private async commitInterrupt(run: RunHandle): Promise<void> {
    const [last, state] = await Promise.all([this.o.store.lastMessage(run.id), this.o.store.load(run.id)]);
    await this.commit(run, {
      hset: { control: '' },
      events: [
        ['turn.dropped', JSON.stringify({ iteration: (state?.iteration ?? 0) + 1, reason: 'interrupt' })],
      ],
      queue: last?.role === 'user' ? { into_last: true } : {},
    });
  }

  /**
   * Cancel: the history stays valid (unanswered calls get an `is_error` "cancelled" result, follow-ups already
   * queued are kept as the last user turn), status `idle`, stop_reason `cancelled`.
   */
  private async finishCancel(run: RunHandle, state: SessionState): Promise<void> {
    await cancelSession(this.o.store, state, { fence: run.fence });
    await this.o.store.unmarkDue(run.id);
  }

  /**
   * Ends the run in `next.status` (`requires_action`, `failed` or `idle`), releasing the lease in the same commit
   * and announcing the status; `events` go before the `session.status` event.
   */
  private async endRun(
    run: RunHandle,
    next: {
      status: 'requires_action' | 'failed' | 'idle';
      pending?: PendingStep | null;
      error?: SessionError | null;
      stopReason?: string | null;
    },
    events: Array<[string, string]> = [],
    extra: ApplyOps = {},
  ): Promise<void> {
    const st = { pending: null, error: null, stopReason: null, ...next };
    await this.commit(
      run,
      mergeOps(extra, {
        hset: {
          status: st.status,
          pending: st.pending ? JSON.stringify(st.pending) : '',
          error: st.error ? JSON.stringify(st.error) : '',
          stop_reason: st.stopReason ?? '',
          control: '',
        },
        release_lease: true,
        events: [...events, ['session.status', statusEvent(st)]],
      }),
    );
    await this.o.store.unmarkDue(run.id);
  }

  private async fail(run: RunHandle, error: SessionError, log: Logger): Promise<void> {
    log.warn({ error }, 'run failed');
    count('trs_runs_failed_total', `{code="${error.code}"}`);
    try {
      const state = await this.o.store.load(run.id);
      // A failed tool step keeps its pending calls, so `resume` runs the failed step again.
      await this.endRun(run, { status: 'failed', pending: state?.pending ?? null, error }, [
        ['session.error', JSON.stringify(error)],
      ]);
    } catch (err) {
      if (!(err instanceof FencedOut)) throw err;
    }
  }

  /** A fenced commit: only the current owner of the run writes; the result tells of a cancel asked meanwhile. */
  private async commit(run: RunHandle, ops: ApplyOps): Promise<ApplyResult> {
    let res: ApplyResult;
    try {
      res = await this.applyThroughOutage(run, ops);
    } catch (err) {
      // The session left `running` under us (cancelled or deleted by a route): this run is over.
      if (err instanceof AppError && (err.code === 'invalid_status' || err.code === 'session_not_found')) {
        throw new FencedOut(run.id);
      }
      throw err;
    }
    if (res.control === 'cancel' && !run.reason) this.abort(run, 'cancel');
    return res;
  }

  /**
   * `apply`, riding out a short store outage (a Redis restart or failover): while the store is unreachable the commit
   * is tried again for at most the lease TTL, so a turn's reply or a tool step's results are kept, not redone. Each
   * commit writes a marker (`last_commit`); an attempt whose answer was lost may have been applied, so it is sent
   * again only once the marker shows it was not — a commit never applies twice. If it was applied, `CommitLanded`
   * makes the run start over from what the store holds. The fencing token still refuses a late commit.
   */
  private async applyThroughOutage(run: RunHandle, ops: ApplyOps): Promise<ApplyResult> {
    const marker = `${run.fence}:${randomBytes(6).toString('hex')}`;
    const marked: ApplyOps = { ...ops, hset: { ...ops.hset, last_commit: marker } };
    const deadline = Date.now() + this.o.leaseTtlMs;
    for (;;) {
      try {
        return await this.o.store.apply(run.id, { fence: run.fence, status: ['running'] }, marked);
      } catch (err) {
        if (!isStoreDown(err)) throw err;
        for (;;) {
          if (Date.now() > deadline || run.reason) throw err;
          await new Promise((resolve) => setTimeout(resolve, 200));
          try {
            const current = await this.o.store.redis.hget(sessionKeys(run.id).meta, 'last_commit');
            if (current === marker) throw new CommitLanded(run.id);
            break; // not applied: send it again
          } catch (e) {
            if (!isStoreDown(e)) throw e;
          }
        }
      }
    }
  }
}

/** A commit whose answer was lost was applied after all (see `applyThroughOutage`). */
class CommitLanded extends Error {
  constructor(readonly sessionId: string) {
    super(`a commit of session ${sessionId} was applied though its answer was lost`);
    this.name = 'CommitLanded';
  }
}

/**
 * Ends a running session as cancelled with a valid history. Used by the owner of the run, or by the cancel route
 * when no live process owns it (fence omitted: guarded by status only).
 */
export async function cancelSession(
  store: SessionStore,
  state: SessionState,
  guard: { fence?: number },
): Promise<ApplyResult> {
  const last = await store.lastMessage(state.id);
  const calls = last ? toolCallsOf(last) : [];
  const st = { status: 'idle' as const, pending: null, stopReason: 'cancelled', error: null };
  const ops: ApplyOps = {
    hset: { status: 'idle', stop_reason: 'cancelled', pending: '', error: '', control: '' },
    release_lease: true,
    events: [['session.status', statusEvent(st)]],
  };
  if (calls.length > 0) {
    const byId = new Map((state.pending?.calls ?? []).map((c) => [c.id, c]));
    const results = calls.map((c) =>
      resultBlock(
        c.id,
        byId.get(c.id)?.result ?? interruptedResult('cancelled before this tool call completed'),
        false,
      ),
    );
    ops.queue = { base: JSON.stringify(results).slice(1, -1) };
  } else if (last?.role === 'user') {
    ops.queue = { into_last: true };
  } else {
    ops.queue = {};
  }
  return store.apply(
    state.id,
    { ...guard, status: guard.fence ? ['running'] : ['running', 'requires_action'] },
    ops,
  );
}

/**
 * Relays a turn's stream events to the event log as they arrive: a batch is written at once when no write is in
 * flight, and what arrives meanwhile is written as the next batch when that write returns (at most `maxEvents` per
 * pipeline). So an event waits at most one round trip, and a fast stream costs one round trip per batch, not per event.
 * One write at a time keeps the log in the events' order.
 */
class StreamRelay {
  private buf: Array<[string, string]>;
  private writing: Promise<void> | null = null;
  private scheduled: NodeJS.Immediate | null = null;

  constructor(
    private readonly store: SessionStore,
    private readonly id: string,
    private readonly maxEvents: number,
    initial: Array<[string, string]>,
  ) {
    this.buf = [...initial];
    if (this.buf.length) this.write();
  }

  push(ev: [string, string]): void {
    this.buf.push(ev);
    // Written at the end of this turn of the event loop, not at once: the events the SDK parses from one upstream
    // read (several, once the process is busy) then go out in one script call and one notice, which the relays
    // fan out as one write per client. Unloaded, that costs well under a millisecond of latency.
    if (!this.writing && !this.scheduled) this.scheduled = setImmediate(this.flush);
  }

  private readonly flush = () => {
    this.scheduled = null;
    if (!this.writing) this.write();
  };

  private write(): void {
    const batch = this.buf.splice(0, this.maxEvents);
    if (batch.length === 0) return;
    this.writing = this.store
      .appendEvents(this.id, batch)
      .catch(() => {
        // The history is the durable record; a lost batch of deltas costs live clients some text, not the turn.
      })
      .then(() => {
        this.writing = null;
        if (this.buf.length) this.write();
      });
  }

  /**
   * Hands back what is still buffered (it goes into the turn's commit, after the write in flight). On one Redis
   * connection the commit is sent after that write and Redis runs a connection's commands in order, so there is
   * nothing to wait for; a cluster client may send a pipeline later than it was made, so there it waits.
   */
  async drain(): Promise<Array<[string, string]>> {
    if (this.scheduled) clearImmediate(this.scheduled);
    this.scheduled = null;
    const rest = this.buf;
    this.buf = [];
    if (this.store.redis.isCluster) await this.writing;
    return rest;
  }
}

/** `a` then `b` as one commit: lists concatenated in that order, fields of `b` over those of `a`. */
function mergeOps(a: ApplyOps, b: ApplyOps): ApplyOps {
  const cat = <T>(x?: T[], y?: T[]) => (x || y ? [...(x ?? []), ...(y ?? [])] : undefined);
  const out: ApplyOps = { ...a, ...b };
  const lists = ['push_msgs', 'push_iters', 'lset_msgs', 'lset_iters', 'events', 'queue_push'] as const;
  for (const k of lists) {
    const v = cat<any>(a[k] as any[], b[k] as any[]);
    if (v) (out as any)[k] = v;
  }
  if (a.hset || b.hset) out.hset = { ...a.hset, ...b.hset };
  if (a.hincr || b.hincr) out.hincr = { ...a.hincr, ...b.hincr };
  return out;
}

/** `tool.completed` events for the calls with a result that were not announced yet; marks them announced. */
function completedEvents(calls: PendingCall[], durations: Map<string, number>): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const c of calls) {
    if (!c.result || c.reported) continue;
    c.reported = true;
    out.push([
      'tool.completed',
      JSON.stringify({
        tool_use_id: c.id,
        name: c.name,
        input: c.input,
        content: c.result.content,
        is_error: c.result.is_error,
        duration_ms: durations.get(c.id) ?? null,
      }),
    ]);
  }
  return out;
}

function findLastIndex<T>(a: T[], f: (x: T) => boolean): number {
  for (let i = a.length - 1; i >= 0; i--) if (f(a[i]!)) return i;
  return -1;
}

function textOf(content: ToolResult['content']): string {
  return typeof content === 'string'
    ? content
    : content.map((b) => (b.type === 'text' ? b.text : `[${b.type}]`)).join(' ');
}

function isAbort(err: unknown, run: RunHandle): boolean {
  return err instanceof APIUserAbortError || (run.controller.signal.aborted && run.reason !== null);
}

function isStreamCut(err: unknown): boolean {
  if (err instanceof APIError) return false;
  const msg = err instanceof Error ? err.message : String(err);
  return /stream ended|terminated|socket|ECONNRESET|premature|before message_stop|other side closed/i.test(
    msg,
  );
}

/** Maps an upstream failure (after the SDK's own retries) to the session's error. */
export function upstreamError(err: unknown): SessionError {
  if (err instanceof APIError) {
    const status = err.status ?? 0;
    const message = err.message.slice(0, 1000);
    if (status === 429) return { code: 'upstream_rate_limited', message, retryable: true };
    if (status === 529) return { code: 'upstream_overloaded', message, retryable: true };
    if (status === 401 || status === 403) return { code: 'upstream_auth_failed', message, retryable: false };
    if (status === 400 || status === 404 || status === 413 || status === 422)
      return { code: 'upstream_invalid_request', message, retryable: false };
    if (/overloaded/i.test(message)) return { code: 'upstream_overloaded', message, retryable: true };
    return { code: 'upstream_error', message, retryable: true };
  }
  if (err instanceof AnthropicError || isStreamCut(err)) {
    return {
      code: 'upstream_error',
      message: err instanceof Error ? err.message : String(err),
      retryable: true,
    };
  }
  return { code: 'internal_error', message: 'The run failed unexpectedly.', retryable: true };
}

export { clientToolNames };
