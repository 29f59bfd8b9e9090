/**
 * Compaction (contract §6.1), through the SDK runner's own `compactBeforeNextTurn()`: the runner sends the request
 * (`compaction: {type: "summarize"}` with its beta) and, when the reply holds a summary, replaces the history it
 * summarized with the reply. The service commits the same change in one `apply`: the summarized messages move, as
 * they were, into a kept segment (`s:{id}:c`, read with `?include=compacted`), the reply takes their place, and the
 * iteration record (`kind: "compaction"`), the usage and the events go with it.
 *
 * When: a compaction asked for by the route while a run is in flight, or by the `compaction` policy after a turn whose
 * input reached `at_input_tokens`, is scheduled on the runner when it is handed the committed history after that
 * turn's tools — so it runs before the next turn, as the runner does it. One asked for while the session is idle or
 * failed is a run of its own (compaction-run.ts): one request, then the session goes back to the status it had. A
 * request the run in flight could no longer take (its last turn ended the run) is turned into such a run when the run
 * ends (`leftoverCompaction`). One the runs before left due (`dueAtStart`: the policy after the last turn, a request
 * not taken yet) is made before the next run's first turn — and, when follow-ups wait, before they join the history
 * (run.ts `step`): the summary covers the history as the last run left it and they follow it, as a message pushed
 * after the SDK runner's `compactAfterFinalTurn` does, never summarized away before the model read it.
 *
 * Invariants: the history a compaction summarizes is exactly the runner's (both are the committed history: the
 * runner is handed it at each boundary), so the segment is the whole history at that point; a compaction is not a
 * model turn: it is an iteration record of its own (the list holds turns and compactions in order, record n at entry
 * n − 1) counted in `compactions`, while `iteration` — and with it the `max_iterations` budget — counts model turns
 * only; a reply without a summary changes nothing (`compaction.skipped`) but its record, as in the runner.
 *
 * Past 400 lines as one file: when a compaction is due (`dueAtStart`), how its request is made and how its reply is
 * committed answer one question — what the runner's `compactBeforeNextTurn()` does to the stored history — and
 * change together; the run of its own is compaction-run.ts.
 */
import type { BetaToolRunner } from '@anthropic-ai/sdk/lib/tools/BetaToolRunner';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { blocksOf, pendingToolCalls, type StoredMessage } from '../history.js';
import type { SessionParams } from '../schemas.js';
import {
  recordCount,
  usageIncr,
  type CompactRequest,
  type IterationRecord,
  type SessionState,
  type Usage,
} from '../store/session-state.js';
import { SEGMENT_SIZES_KEPT, type ApplyOps, type ApplyResult } from '../store/apply-ops.js';
import { microsToUsd } from '../cost/prices.js';
import { commit, countSpend, isPausedReply, mergeOps, persistedEvent } from './commit.js';
import type { SessionStore } from '../store/store.js';
import type { RunDeps, RunHandle } from './run-handle.js';
import { statusEvent } from './status.js';
import { eventOf } from '../events/schemas.js';
import { isUserBlock } from '../chat/event-shapes.js';

/** The beta of a compaction request, and of every request whose history starts with a summary. */
export const COMPACTION_BETA = 'compact-2026-09-04';

/** What the runner loop yields: a reply's stream, or (without streaming) its pending message (typed as the message). */
type RunnerItem = { finalMessage(): Promise<BetaMessage> } | BetaMessage | PromiseLike<BetaMessage>;

/** Whether `message` is a compaction's reply: an assistant message whose first block is a `compaction` block. */
export function isSummary(message: StoredMessage | undefined): boolean {
  return message?.role === 'assistant' && blocksOf(message)[0]?.type === 'compaction';
}

/**
 * Whether a chat page shows `messages` ending with a user message (src/chat/history.ts toUIMessages): the last one
 * that shows anything is a user turn (a block history.ts `userPart` shows: src/chat/event-shapes.ts `isUserBlock`),
 * not a reply; a system message, a summary alone and a user message of tool results only (or of files the chat has
 * no part for) show nothing of their own. Kept with each segment (seg_bytes), so that a page that does not read a
 * segment still names the answer after the summary that follows it (a compaction at a run's start) by the summary's
 * index.
 */
export function endsWithUserTurn(messages: readonly StoredMessage[]): boolean {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    const blocks = blocksOf(m);
    if (m.role === 'assistant') {
      if (isSummary(m) && blocks.every((b) => b.type === 'compaction')) continue;
      return false;
    }
    if (m.role === 'user' && blocks.some(isUserBlock)) return true;
  }
  return false;
}

/**
 * Whether the history ends with a summary and nothing after it: the model has a turn to take from there (the
 * runner's "the compaction hands the turn back before the model answers").
 */
export function endsWithSummary(history: readonly StoredMessage[]): boolean {
  return history.length > 0 && isSummary(history.at(-1));
}

/** `params` with the compaction beta among its `betas` (once). */
export function withCompactionBeta(params: SessionParams): SessionParams {
  const betas = params.betas ?? [];
  return betas.includes(COMPACTION_BETA) ? params : { ...params, betas: [...betas, COMPACTION_BETA] };
}

/**
 * The params a turn sends: with the compaction beta when the history holds a summary, which the API needs (first
 * after a compaction here; anywhere in a history given at create).
 */
export function paramsFor(params: SessionParams, history: readonly StoredMessage[]): SessionParams {
  return isSummary(history[0]) || history.some(isSummary) ? withCompactionBeta(params) : params;
}

/** A reply the runner resumes rather than answers: `pause_turn`, or `compaction` (server-side compaction). */
export function isUnfinished(stopReason: string | null | undefined): boolean {
  return stopReason === 'pause_turn' || stopReason === 'compaction';
}

/**
 * Whether the history (whose last message is `last`) ends with a reply the API paused: one with a server call
 * still open (the API takes nothing after it but its continuation), or one whose iteration record stopped
 * unfinished (`pause_turn`, server-side `compaction`), as a run tells it (run.ts `pausedReply`) — the record only
 * when it is that reply's (its `reply_index` is the history's last message, and no `PUT …/messages` came since). Its
 * continuation comes before anything else: the API compacts nothing that ends mid-turn. One LINDEX, only when the
 * history ends with a reply and no call is open.
 */
export async function endsPaused(
  store: Pick<SessionStore, 'iterationRecords'>,
  s: Pick<SessionState, 'id' | 'iteration' | 'compactions' | 'msgBase' | 'msgCount' | 'replacedAt'>,
  last: StoredMessage | null | undefined,
): Promise<boolean> {
  if (last?.role !== 'assistant') return false;
  if (isPausedReply(last)) return true;
  if (recordCount(s) <= s.replacedAt) return false;
  const [record] = await store.iterationRecords(s.id, -1, -1);
  return recordTellsPaused(record, s, s.msgCount);
}

/**
 * Whether `record`, the session's last, tells that the history (of `length` messages) ends with a reply the API
 * paused: a turn's record that stopped unfinished, of the reply at the history's end, and written since the last
 * `PUT …/messages` (a replaced history's records tell nothing of it).
 */
export function recordTellsPaused(
  record: IterationRecord | null | undefined,
  s: Pick<SessionState, 'iteration' | 'compactions' | 'msgBase' | 'replacedAt'>,
  length: number,
): boolean {
  return (
    record !== null &&
    record !== undefined &&
    recordCount(s) > s.replacedAt &&
    record.kind !== 'compaction' &&
    record.reply_index === s.msgBase + length - 1 &&
    isUnfinished(record.stop_reason)
  );
}

/** The input a turn was billed for, as the policy counts it. */
export const inputTotal = (u: Usage): number =>
  u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;

/** A reply's usage, absent counts as 0. */
export function usageOf(message: BetaMessage): Usage {
  return {
    input_tokens: message.usage?.input_tokens ?? 0,
    output_tokens: message.usage?.output_tokens ?? 0,
    cache_creation_input_tokens: message.usage?.cache_creation_input_tokens ?? 0,
    cache_read_input_tokens: message.usage?.cache_read_input_tokens ?? 0,
  };
}

/** A turn's usage as its iteration record and `turn.completed` show it: with `cost_usd` and `server_tool_use`. */
export function recordedUsage(message: BetaMessage, costMicros: number | null): IterationRecord['usage'] {
  const serverToolUse: Record<string, number> = {};
  for (const [name, n] of Object.entries(message.usage?.server_tool_use ?? {}))
    if (typeof n === 'number') serverToolUse[name] = n;
  return {
    ...usageOf(message),
    cost_usd: costMicros === null ? null : microsToUsd(costMicros),
    server_tool_use: serverToolUse,
  };
}

/** The summary of a compaction reply, or null when it has none (a failed compaction). */
function summaryOf(message: BetaMessage): string | null {
  for (const block of message.content) {
    if (block.type === 'compaction' && block.content) return block.content;
  }
  return null;
}

/**
 * Awaits a compaction item of the runner and commits it with `extra` ops (a run of its own ends in them; they may
 * depend on whether the reply had a summary): the history becomes the summary (or stays, without one), `history` and
 * `state` follow. Returns the reply's usage and how many follow-ups the commit merged.
 */
export async function commitCompaction(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  item: RunnerItem,
  params: SessionParams,
  /** Model turns completed before it (`iteration`, which it leaves as it is), and its own record number `n`. */
  at: { iteration: number; n: number },
  fromRequest: boolean,
  extra: ApplyOps | ((summarized: boolean) => ApplyOps) = {},
  /** `commit`'s `alongside`: a compaction run's end. */
  alongside?: (res: ApplyResult) => Promise<void> | null,
): Promise<{ usage: IterationRecord['usage']; mergedCount: number }> {
  const { iteration, n } = at;
  const startedAt = Date.now();
  const t0 = performance.now();
  // Live news, like `turn.started`: no session field changes until the commit.
  run.news.send([eventOf('compaction.started', { iteration, n, message_count: history.length })]);
  const message = 'finalMessage' in item ? await item.finalMessage() : await item;
  const costMicros = deps.store.spend.prices.replyCost(params.model, message.model, message.usage);
  const usageIncrs = usageIncr(message.usage, costMicros);
  countSpend(deps, state.tenant, params.model, usageIncrs);
  const usage = recordedUsage(message, costMicros);
  const summary = summaryOf(message);
  const count = summary === null ? 0 : history.length;
  const reply: StoredMessage = { role: 'assistant', content: message.content };
  const record: IterationRecord = {
    n,
    iteration,
    kind: 'compaction',
    summarized_messages: count,
    // The summary stands where the messages it replaced end, in the session's whole record.
    reply_index: summary === null ? -1 : state.msgBase + count,
    results_index: null,
    request: {
      model: params.model,
      max_tokens: params.max_tokens,
      message_count: history.length,
      params_rev: state.paramsRev,
    },
    stop_reason: message.stop_reason,
    usage,
    tool_calls: [],
    started_at: new Date(startedAt).toISOString(),
    completed_at: new Date().toISOString(),
    timings: { upstream_ms: Math.round(performance.now() - t0), first_event_ms: null, tools_ms: null },
  };
  const outcome: [string, string] =
    summary === null
      ? eventOf('compaction.skipped', { iteration, n, reason: 'no_summary' })
      : eventOf('compaction.completed', { iteration, n, summarized_messages: count, message });
  const ops: ApplyOps = {
    ...(summary === null
      ? {}
      : // The segment names the record of the compaction that made it.
        {
          compact: {
            count,
            at_iteration: n,
            summary: JSON.stringify(reply),
            sizes: SEGMENT_SIZES_KEPT,
            ends_with_user: endsWithUserTurn(history),
            // As stored (the store writes each message as its JSON.stringify, and this is the committed history):
            // the store builds a large segment from them in parts (Store `apply`).
            messages: history.slice(0, count).map((m) => JSON.stringify(m)),
          },
        }),
    push_iters: [JSON.stringify(record)],
    // Not a model turn: `iteration` stays, so `max_iterations` counts turns only.
    hincr: { compactions: 1, ...usageIncrs },
    // A route's request is done; one the policy made was never stored.
    ...(fromRequest ? { hset: { compact: '' } } : {}),
    events: [outcome, persistedEvent(iteration, n, 'compaction')],
  };
  const res = await commit(
    deps,
    run,
    mergeOps(ops, typeof extra === 'function' ? extra(summary !== null) : extra),
    alongside,
  );
  if (fromRequest) state.compactRequest = null;
  if (summary !== null) {
    history.splice(0, count, reply);
    state.msgBase += count;
  }
  return { usage, mergedCount: res.mergedCount };
}

/**
 * Whether a history of `length` messages ending with `last` has something to summarize: not nothing, nor only a
 * summary (the API would summarize a summary).
 */
const compactable = (length: number, last: StoredMessage | null | undefined): boolean =>
  length > 0 && !(length === 1 && isSummary(last ?? undefined));

/** A compaction to make before a run's first turn: its instructions, and whether the route asked for it. */
export interface DueCompaction {
  instructions: string | null;
  fromRequest: boolean;
}

/**
 * The compaction due before a run's first turn, left by the runs before it: a request the last run could not take
 * (`POST …/compact` while it ran), or the policy after the session's last turn (a run that ended with it compacts
 * before its next turn). Null when none is, or the history (`length` messages, the last `last`) has nothing to
 * summarize. `lastRecord`: the session's last iteration record when known (undefined: read here, one LINDEX, only
 * with the policy set).
 */
export async function dueAtStart(
  store: Pick<SessionStore, 'iterationRecords'>,
  state: Pick<SessionState, 'id' | 'iteration' | 'compaction' | 'compactRequest'>,
  length: number,
  last: StoredMessage | null | undefined,
  lastRecord?: IterationRecord | null,
): Promise<DueCompaction | null> {
  if (!compactable(length, last)) return null;
  if (state.compactRequest && !state.compactRequest.resume) {
    return { instructions: state.compactRequest.instructions, fromRequest: true };
  }
  if (!state.compaction || state.iteration === 0) return null;
  const record = lastRecord !== undefined ? lastRecord : (await store.iterationRecords(state.id, -1, -1))[0];
  if (!record || record.kind === 'compaction' || inputTotal(record.usage) < state.compaction.at_input_tokens)
    return null;
  return { instructions: state.compaction.instructions ?? null, fromRequest: false };
}

/**
 * The compactions of one runner: scheduled with `compactBeforeNextTurn()` at a turn boundary, told apart from the
 * turns in the loop (the runner yields the compaction's reply like any other), and committed.
 */
export class RunCompaction {
  /** A compaction is scheduled: the next item the runner yields is its reply. */
  expecting = false;
  private fromRequest = false;

  constructor(
    private readonly deps: RunDeps,
    private readonly run: RunHandle,
    private readonly state: SessionState,
    private readonly runner: BetaToolRunner<boolean>,
  ) {}

  /** Before the runner's first turn: the compaction due then (`dueAtStart`), when there is one. */
  async atStart(history: readonly StoredMessage[]): Promise<void> {
    const due = await dueAtStart(this.deps.store, this.state, history.length, history.at(-1));
    if (due) this.scheduleDue(due, history);
  }

  /** Schedules `due` (as `dueAtStart` found it) before the runner's first turn. */
  scheduleDue(due: DueCompaction, history: readonly StoredMessage[]): void {
    this.schedule(due.instructions, due.fromRequest, history);
  }

  /** After the runner was handed the history of the next turn: a request that came meanwhile, or the policy. */
  afterHandOver(usage: Usage, history: readonly StoredMessage[]): void {
    const { state } = this;
    if (state.compactRequest && !state.compactRequest.resume) {
      this.schedule(state.compactRequest.instructions, true, history);
    } else if (state.compaction && inputTotal(usage) >= state.compaction.at_input_tokens) {
      this.schedule(state.compaction.instructions ?? null, false, history);
    }
  }

  private schedule(instructions: string | null, fromRequest: boolean, history: readonly StoredMessage[]) {
    if (this.expecting || !compactable(history.length, history.at(-1))) return;
    this.expecting = true;
    this.fromRequest = fromRequest;
    // The compaction request needs its beta; the thread's params are what the runner forks it from.
    const params = this.runner.params;
    this.runner.setMessagesParams({
      ...params,
      betas: [...new Set([...(params.betas ?? []), COMPACTION_BETA])],
    });
    this.runner.compactBeforeNextTurn({ type: 'summarize', ...(instructions ? { instructions } : {}) });
  }

  /** Commits the compaction the runner just yielded as record `at.n`, after `at.iteration` turns. Returns its usage. */
  async commit(
    item: RunnerItem,
    history: StoredMessage[],
    params: SessionParams,
    at: { iteration: number; n: number },
  ): Promise<IterationRecord['usage']> {
    this.expecting = false;
    return (
      await commitCompaction(this.deps, this.run, this.state, history, item, params, at, this.fromRequest)
    ).usage;
  }
}

/**
 * After a run ended: a compaction asked for while it ran that it could not take (its last turn ended the run) runs
 * now, as a run of its own. Returns whether one was started (the caller claims the run again).
 */
export async function leftoverCompaction(deps: RunDeps, id: string): Promise<boolean> {
  const s = await deps.store.load(id);
  const request: CompactRequest | null | undefined = s?.compactRequest;
  if (!s || !request || request.resume || (s.status !== 'idle' && s.status !== 'failed')) return false;
  // Not over calls without results (a failed tool step) or a paused reply (an open server call): the API compacts
  // only between turns, and the route refuses these (409). The request stays scheduled: the next run (a `resume`, a
  // message) takes it once its first turn boundary comes.
  const last = await deps.store.lastMessage(id);
  if (last && (pendingToolCalls([last]).length > 0 || (await endsPaused(deps.store, s, last)))) return false;
  const next: Partial<SessionState> & { status: 'running' } = {
    status: 'running',
    compactRequest: {
      instructions: request.instructions,
      resume: { status: s.status, stop_reason: s.stopReason, error: s.error },
    },
  };
  try {
    await deps.store.apply(id, { rev: s.revision }, compactRunOps(s, next), s.tenant);
  } catch {
    // The session moved on (a message started a run, say): that run's runner takes the request at its start.
    return false;
  }
  return true;
}

/** Ops that start a compaction run (status `running`, the request with what to go back to). */
export function compactRunOps(
  s: SessionState,
  next: Partial<SessionState> & { status: 'running' },
): ApplyOps {
  const merged = { ...s, ...next, stopReason: null, error: null };
  return {
    hset: {
      status: 'running',
      stop_reason: '',
      error: '',
      control: '',
      compact: JSON.stringify(next.compactRequest),
    },
    events: [['session.status', statusEvent(merged)]],
  };
}
