import { APIUserAbortError } from '@anthropic-ai/sdk';
import {
  runRunnableTool,
  type BetaRunnableTool,
  type BetaToolRunContext,
} from '@anthropic-ai/sdk/lib/tools/BetaRunnableTool';
import type { BetaToolUseBlock } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { ServerTool } from '../../tools/types.js';
import { blocksOf, extendHistory, pendingToolCalls, type StoredMessage } from '../history.js';
import { toolRan } from '../observability/run-telemetry.js';
import {
  fitResults,
  markStored,
  outstandingTasks,
  pendingFields,
  resultsTurn,
  setResult,
  type PendingCall,
  type PendingStep,
  type ToolResult,
} from '../store/pending.js';
import {
  recordCount,
  type IterationRecord,
  type SessionError,
  type SessionState,
} from '../store/session-state.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { commit, completedEvents, endRun, mergeOps, persistedEvent } from './commit.js';
import { parkForTasks, queueTasks } from './tool-tasks.js';
import { interruptedResult, heldForReview, pendingCalls, callIdempotent } from './policy.js';
import type { RunDeps, RunHandle } from './run-handle.js';
import { eventOf } from '../events/schemas.js';
import { hasLoneSurrogate } from '../json-unicode.js';
import { ToolError } from '@anthropic-ai/sdk/lib/tools/ToolError';

/** The session's runnable tools (server tools, MCP tools, …) by name, as the toolbox resolves them for this step. */
export function sessionTools(deps: RunDeps, state: SessionState): Promise<Map<string, ServerTool>> {
  return deps.toolbox.forSession({
    tenant: state.tenant,
    session: state.id,
    tools: state.tools,
    tenantTools: state.tenantTools,
  });
}

/** The session's runnable tools as the SDK runs them, each timed into `durations` by tool_use id. */
export function serverRunnables(
  deps: RunDeps,
  sessionTools: ReadonlyMap<string, ServerTool>,
  durations: Map<string, number>,
): BetaRunnableTool[] {
  const out: BetaRunnableTool[] = [];
  for (const [name, { tool, metricLabel }] of sessionTools) {
    out.push({
      ...tool,
      run: async (args: unknown, ctx?: BetaToolRunContext) => {
        const t0 = performance.now();
        let ok = false;
        try {
          let out: Awaited<ReturnType<typeof tool.run>>;
          try {
            out = await tool.run(args, ctx);
          } catch (err) {
            throw checkedThrow(name, err, deps.toolbox.resultMaxBytes);
          }
          // Every source (server tools, memory, MCP, …) is bounded here, before the result can enter the history.
          const text = typeof out === 'string' ? out : JSON.stringify(out);
          const bytes = Buffer.byteLength(text);
          const limit = deps.toolbox.resultMaxBytes;
          if (bytes > limit)
            throw new Error(
              `the result of ${name} is ${bytes} bytes; a tool result may have at most ${limit} bytes (TOOL_RESULT_MAX_BYTES)`,
            );
          // A text cut inside a surrogate pair (a tool, or an MCP server, slicing UTF-16 units): the Messages API
          // refuses the request that carries it, and every later one of the session. Blocks are walked only when
          // their JSON text has a surrogate escape (json-unicode.ts), which is where a lone one shows.
          if (typeof out === 'string' ? !out.isWellFormed() : hasLoneSurrogate(Buffer.from(text), out))
            throw new Error(`the result of ${name} ${LONE_SURROGATE}`);
          ok = true;
          return out;
        } finally {
          const ms = performance.now() - t0;
          toolRan(deps.metrics, metricLabel ?? name, ms, ok);
          if (ctx?.toolUse.id) durations.set(ctx.toolUse.id, Math.round(ms));
        }
      },
    });
  }
  return out;
}

const LONE_SURROGATE =
  'holds a lone surrogate (half of a UTF-16 pair, a text cut inside a character); a tool result must be well-formed Unicode';

/**
 * What a tool threw, as the SDK will make it its result (runRunnableTool: a ToolError's content, else
 * `Error: <message>`): it enters the history as a result does, so it is held to the same bounds — at most `limit`
 * bytes (TOOL_RESULT_MAX_BYTES), well-formed Unicode (an MCP server's error text cut inside a character) — and
 * replaced by an error naming the bound it breaks.
 */
function checkedThrow(name: string, err: unknown, limit: number): unknown {
  const content = err instanceof ToolError ? err.content : err instanceof Error ? err.message : String(err);
  const text = typeof content === 'string' ? content : JSON.stringify(content);
  const bytes = Buffer.byteLength(text);
  if (bytes > limit)
    return new Error(
      `${name} failed with an error text of ${bytes} bytes; a tool result may have at most ${limit} bytes (TOOL_RESULT_MAX_BYTES)`,
      { cause: err },
    );
  const bad =
    typeof content === 'string' ? !content.isWellFormed() : hasLoneSurrogate(Buffer.from(text), content);
  return bad ? new Error(`${name} failed with an error text that ${LONE_SURROGATE}`, { cause: err }) : err;
}

/**
 * The history ends with an assistant turn whose calls are not answered: work out their results. Server calls that
 * need no decision run (a started call of a crashed run again only if idempotent); denied calls get the reason;
 * client calls and undecided approvals send the session to `requires_action`, tenant tools' calls that need no
 * decision queued first; with none of those, tenant tools' calls park the run (tool-tasks.ts).
 */
export async function toolStep(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
): Promise<'done' | 'again'> {
  const calls = pendingToolCalls(history);
  const tools = await sessionTools(deps, state);
  // A step built by this run (from the history here, or from its reply: `freshStep`) queued no task yet: a task the
  // queue knows for one of its calls is a dropped step's (tool-tasks.ts `queueTasks`).
  const fresh = !state.pending || run.freshStep;
  run.freshStep = false;
  const step: PendingStep = state.pending ?? {
    calls: pendingCalls(state, calls, tools),
    review: false,
    iteration: state.iteration,
    // The reply these calls are of is the last record (a history given with unanswered calls has none).
    record: recordCount(state),
  };
  const durations = new Map<string, number>();
  const toRun: PendingCall[] = [];
  for (const c of step.calls) {
    if (c.result) continue;
    if (c.approval === 'denied') {
      setResult(c, { content: `Tool call denied${c.reason ? `: ${c.reason}` : '.'}`, is_error: true });
    } else if (c.runner) {
      // A tenant tool's call: a task answers it (parkForTasks below).
    } else if (c.kind === 'server' && c.approval !== 'required') {
      // Unknown now (an MCP server that does not answer) counts as not idempotent.
      if (c.started && !callIdempotent(tools.get(c.name), c.input)) {
        setResult(c, interruptedResult(`the run was interrupted while ${c.name} ran; it was not run again`));
      } else {
        toRun.push(c);
      }
    }
  }
  if (toRun.length > 0) {
    for (const c of toRun) c.started = true;
    await commit(deps, run, {
      // A tenant tool's call whose task is out (queued while the step waited for its client) may have had its result
      // delivered since this run read the step: its fields are left as stored, not blanked.
      hset: pendingFields(step, outstandingTasks(step)),
      events: toRun.map((c): [string, string] =>
        eventOf('tool.started', { tool_use_id: c.id, name: c.name, input: c.input }),
      ),
    });
    markStored(step);
    // Only the session's server tools are here, so a call to any other name is answered "not found".
    const runnables = new Map(serverRunnables(deps, tools, durations).map((t) => [t.name, t]));
    await Promise.all(
      toRun.map(async (c) => {
        const tool = runnables.get(c.name);
        if (!tool) {
          setResult(c, { content: `Error: Tool '${c.name}' not found`, is_error: true });
          return;
        }
        const toolUse: BetaToolUseBlock = { type: 'tool_use', id: c.id, name: c.name, input: c.input };
        const out = await run.obs.tool(c.name, c.id, () =>
          runRunnableTool(tool, c.input, { toolUse, toolUseBlock: toolUse, signal: run.controller.signal }),
        );
        setResult(c, { content: out.content, is_error: out.isError });
      }),
    );
    // As in runTurns: tools cut short by a shutdown are left `started` for the replica that resumes the run.
    if (run.leavesToolsUnanswered) throw new APIUserAbortError();
    // Each result is at most TOOL_RESULT_MAX_BYTES, the step's together at most MAX_TURN_BYTES (the turn they form,
    // sent again with each status event while the step waits): one that would take them past it is an error saying so.
    fitResults(step.calls, new Set(toRun.map((c) => c.id)), deps.store.maxTurnBytes);
  }
  const waiting = step.calls.some((c) => c.approval === 'required' || (c.kind === 'client' && !c.result));
  const tasks = outstandingTasks(step);
  if (waiting) {
    // The tenant's tools work while the client is asked (the server tools above ran already): their tasks are
    // queued before the session says it waits, so a process dying in between leaves the session `running`, taken
    // over, and its run queues nothing twice (`queueTasks`). Calls waiting for their approval are not among them.
    const out = tasks.length > 0 ? await queueTasks(deps, run, state, step, tasks, fresh) : [];
    await endRun(
      deps,
      run,
      // A task's result may be delivered before this write lands (the session is still `running`): its fields are
      // left as stored, and the client's answer finds it on the step.
      { status: 'requires_action', pending: step, actionTimeoutS: state.actionTimeoutS, tasksOut: out },
      completedEvents(step.calls, durations),
    );
    return 'done';
  }
  if (tasks.length > 0) return parkForTasks(deps, run, state, step, tasks, fresh);
  const { outcome } = await afterTools(deps, run, state, history, step, null, durations);
  return outcome === 'continue' ? 'again' : 'done';
}

/**
 * All results of the pending step are known: pause for review or on a tool error if the policy says so, else
 * commit them as the next user turn (with any queued follow-ups after them, the SDK's order).
 */
export async function afterTools(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  step: PendingStep,
  record: IterationRecord | null,
  durations: ReadonlyMap<string, number>,
  /** The reply's own ops when it is not committed yet (one commit per iteration): they join this commit. */
  replyOps: ApplyOps | null = null,
): Promise<{ outcome: 'continue' | 'paused' | 'done'; paramsRev: number }> {
  // An uncommitted reply carries its iteration record in full; a committed one gets its results index set.
  const withReply = (ops: ApplyOps): ApplyOps =>
    replyOps && record ? mergeOps({ ...replyOps, push_iters: [JSON.stringify(record)] }, ops) : ops;
  const completed = completedEvents(step.calls, durations);
  const held = await holdResults(deps, run, state, step, completed, withReply);
  if (held) return { outcome: held, paramsRev: state.paramsRev };
  const ops = resultsOps(state, history, step, completed);
  await indexResults(deps, run, state, history, step, record, ops, replyOps !== null);
  const res = await commit(deps, run, withReply(ops));
  extendHistory(history, res);
  return { outcome: 'continue', paramsRev: res.paramsRev };
}

/**
 * The results do not go to the model yet when the policy says so: a failed server tool fails the session
 * (`on_tool_error: fail`), or the session waits at `requires_action` for a review (the tools' review policy, or
 * `on_tool_error: pause`). Null: they go on. `step.review` marks results a client accepted (continue, or a message
 * after a failure): they go as they are.
 */
async function holdResults(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  step: PendingStep,
  completed: Array<[string, string]>,
  withReply: (ops: ApplyOps) => ApplyOps,
): Promise<'done' | 'paused' | null> {
  const serverResults = step.calls.filter((c) => c.kind === 'server' && c.approval !== 'denied');
  const failed = serverResults.filter((c) => c.result?.is_error);
  const firstFailed = failed[0]?.result;
  if (firstFailed && state.onToolError === 'fail' && !step.review) {
    const error: SessionError = {
      code: 'tool_failed',
      message: `Tool ${failed.map((c) => c.name).join(', ')} failed: ${textOf(firstFailed.content).slice(0, 500)}`,
      retryable: true,
    };
    await endRun(
      deps,
      run,
      { status: 'failed', pending: step, error },
      [...completed, eventOf('session.error', error)],
      withReply({}),
    );
    return 'done';
  }
  if (!heldForReview(state, step)) return null;
  step.review = true;
  await endRun(
    deps,
    run,
    { status: 'requires_action', pending: step, actionTimeoutS: state.actionTimeoutS },
    completed,
    withReply({}),
  );
  return 'paused';
}

/** The results commit: the step's fields dropped, its results (and queued follow-ups) as the next user turn. */
function resultsOps(
  state: SessionState,
  history: StoredMessage[],
  step: PendingStep,
  completed: Array<[string, string]>,
): ApplyOps {
  const cache = state.cacheToolResults;
  const ops: ApplyOps = {
    hset: pendingFields(null),
    events: [...completed, persistedEvent(step.iteration, stepRecord(step))],
    // Results already in the store (a client's, a reviewer's) are named, not sent again.
    queue: {
      results: resultsTurn(step.calls, () => interruptedResult('no result')),
      ...(cache ? { cache_last: true } : {}),
    },
  };
  // One cache breakpoint on tool results at a time: the previous results turn loses its marker in the store (the
  // history a new run sends). The run's own copy (`history`, what its runner was handed) keeps it: an edit there would
  // make the runner replay the whole history instead of continuing its message thread, and the SDK itself drops the
  // markers of answered messages whenever it does send them again.
  if (cache) {
    const prev = history.findLastIndex((m) => m.role === 'user' && blocksOf(m).some((b) => b.cache_control));
    const m = history[prev];
    if (m) {
      const stripped = { ...m, content: blocksOf(m).map(({ cache_control: _c, ...b }) => b) };
      ops.lset_msgs = [[prev, JSON.stringify(stripped)]];
    }
  }
  return ops;
}

/**
 * The iteration record learns where its results turn is (`results_index`): the run's own record (written with the
 * reply when `withReply`, else rewritten by `ops`), or, for a tool step of an earlier runner, the stored one.
 */
async function indexResults(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  history: StoredMessage[],
  step: PendingStep,
  record: IterationRecord | null,
  ops: ApplyOps,
  withReply: boolean,
): Promise<void> {
  // Record n is entry n - 1 of the list (turns and compactions in order).
  const at = stepRecord(step) - 1;
  if (record) {
    indexed(record, state.msgBase + history.length, step);
    if (!withReply) ops.lset_iters = [[at, JSON.stringify(record)]];
    return;
  }
  if (at < 0) return;
  const [rec] = await deps.store.iterationRecords(run.id, at, at);
  if (rec && rec.kind !== 'compaction' && rec.iteration === step.iteration) {
    indexed(rec, state.msgBase + history.length, step);
    ops.lset_iters = [[at, JSON.stringify(rec)]];
  }
}

/** The record with its results index and its denied calls (IterationRecord `denied`). */
function indexed(record: IterationRecord, resultsIndex: number, step: PendingStep): void {
  record.results_index = resultsIndex;
  const denied = step.calls.flatMap((c) =>
    c.approval === 'denied' ? [{ id: c.id, ...(c.reason ? { reason: c.reason } : {}) }] : [],
  );
  if (denied.length > 0) record.denied = denied;
}

/** The number of the record a step's calls are of (a step stored before records had numbers: its iteration). */
const stepRecord = (step: PendingStep): number => step.record ?? step.iteration;

function textOf(content: ToolResult['content']): string {
  return typeof content === 'string'
    ? content
    : content.map((b) => (b.type === 'text' ? b.text : `[${b.type}]`)).join(' ');
}
