import { z } from 'zod';
import { conflict, zodDetails, InvalidRequest } from '../errors.js';
import { BUDGET_EXHAUSTED, assertBudgetLeft } from '../engine/budget.js';
import { TENANT_BUDGET_EXHAUSTED } from '../cost/spend.js';
import { assertActionOpen, assertCallsOpen } from './deadlines.js';
import { blocksOf, pendingToolCalls } from '../history.js';
import { isAgentTool, type decisionBody, type toolResultBody, type toolResultsBody } from '../schemas.js';
import {
  encodeResult,
  fitResults,
  resultsBytes,
  setEncodedResult,
  type PendingStep,
  type ToolResult,
} from '../store/pending.js';
import { resultsTooLarge } from '../store/store.js';
import { deadlineFields, recordCount, type SessionState } from '../store/session-state.js';
import { completedEvents } from '../engine/commit.js';
import { heldForReview } from '../engine/policy.js';
import type { ApplyOps } from '../store/apply-ops.js';
import { mutate, runOps, statusOps, type MutationResult, type SessionDeps } from './mutate.js';
import { sessionView } from './view.js';
import { eventOf } from '../events/schemas.js';
import { userText } from '../message-schemas.js';

type ResultInput = z.infer<typeof toolResultsBody>['results'][number];

/**
 * What a sub-agent's call needs of its input (src/agents/sweep.ts): a `prompt` the child's `input` takes, text that
 * is not blank (`userText`, as create checks it).
 */
const agentInput = z.looseObject({ prompt: userText });

/** Whether the pending step can go on without a client: no decision and no client result missing. */
function ready(step: PendingStep): boolean {
  return !step.calls.some((c) => c.approval === 'required' || (c.kind === 'client' && !c.result));
}

/** The issues of a zod error thrown by a tool's `parse`, if it is one. */
function zodIssues(err: unknown): z.core.$ZodIssue[] | null {
  return typeof err === 'object' && err !== null && 'issues' in err && Array.isArray(err.issues)
    ? err.issues
    : null;
}

/** Approve (optionally with an edited input) or deny a call that waits for a decision. */
export function decide(
  deps: SessionDeps,
  tenant: string,
  id: string,
  toolUseId: string,
  body: z.infer<typeof decisionBody>,
  ifMatch?: number,
  by?: string,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    assertActionOpen(s, deps.store.clock.now());
    assertCallsOpen(s, [toolUseId]);
    if (s.status !== 'requires_action' || !s.pending?.calls.some((c) => c.approval !== 'auto')) {
      throw conflict('nothing_awaits_approval', 'No tool call of this session waits for a decision.');
    }
    // A reply under review (`pause_after_turn`): its calls wait for the review's `continue` first, which brings them
    // to their decisions (`approve_tool_calls`). Decided now, one would run (a server call, a sub-agent's child)
    // before its turn was reviewed.
    if (s.pending.turn) {
      throw conflict(
        'nothing_awaits_approval',
        'The reply is under review (review_turn): its tool calls wait for POST …/continue before any decision.',
      );
    }
    const step = structuredClone(s.pending);
    const call = step.calls.find((c) => c.id === toolUseId);
    if (!call) {
      throw conflict('unknown_tool_use_id', `No pending tool call has the id ${toolUseId}.`, {
        tool_use_id: toolUseId,
      });
    }
    if (call.approval === 'auto')
      throw conflict('approval_not_required', `The call ${toolUseId} needs no decision.`);
    if (call.approval !== 'required')
      throw conflict('tool_call_already_decided', `The call ${toolUseId} was already ${call.approval}.`);
    const ops: ApplyOps = {};
    const isAgent = s.tools.some((t) => isAgentTool(t) && t.name === call.name);
    if (body.decision === 'deny') {
      call.approval = 'denied';
      if (body.reason) call.reason = body.reason;
    } else {
      call.approval = 'approved';
      if (body.input) {
        const tool = deps.serverTools.get(call.name);
        try {
          // A sub-agent's call: its edited input is the child's prompt.
          if (isAgent) agentInput.parse(body.input);
          else tool?.tool.parse?.(body.input);
        } catch (err) {
          const issues = zodIssues(err);
          throw new InvalidRequest(
            'invalid_tool_input',
            `The edited input does not fit ${call.name}'s schema.`,
            issues ? zodDetails(issues, ['input']) : String(err),
          );
        }
        call.input = body.input;
        // The model must see the call that ran: the edited input replaces the call's input in the history.
        const last = await deps.store.lastMessage(id);
        if (!last) throw conflict('unknown_tool_use_id', 'The history has no such call.');
        const edited = {
          ...last,
          content: blocksOf(last).map((b) =>
            b.type === 'tool_use' && b.id === toolUseId ? { ...b, input: body.input } : b,
          ),
        };
        ops.lset_msgs = [[s.msgCount - 1, JSON.stringify(edited)]];
      }
    }
    const decided: [string, string] = eventOf('tool_call.decided', {
      tool_use_id: toolUseId,
      decision: body.decision,
      input: body.input,
      reason: body.reason,
      by,
    });
    const goes = !step.calls.some((c) => c.approval === 'required');
    // A sub-agent's call approved while other calls of its step wait for their decisions: its child may start now
    // (the sweep starts the children of approved calls whatever the rest of the step), and no run ends to wake the
    // sweep until the last decision. When the run starts, its end wakes it.
    const spawns = !goes && call.approval === 'approved' && call.kind === 'client' && isAgent;
    const st = goes
      ? runOps(s, { pending: step })
      : statusOps(s, { status: 'requires_action', pending: step });
    return {
      ops: {
        ...ops,
        ...st,
        events: [decided, ...(st.events ?? [])],
      },
      starts: goes,
      spawns,
      // An answer to the step the run waits on, no new run: it lands over the tenant's daily cap too, and the run
      // stops after the step's tool results, before its next model request (`tenant_budget_exhausted`).
      costCap: false,
      // A denial is never refused at TENANT_MAX_BYTES (counted, as a deadline's denial is): it stops a call, and adds
      // its event and the denial's text (a reason of at most 10,000 characters). An approval is refused there: it lets
      // the call run and its result land in the history.
      ...(body.decision === 'deny' ? { storageCap: false } : {}),
    };
  });
}

/** One result: a client tool's, or a replacement of a result under review. Returns its event. */
function applyResult(step: PendingStep, r: ResultInput): [string, string] {
  const call = step.calls.find((c) => c.id === r.tool_use_id);
  if (!call)
    throw conflict('unknown_tool_use_id', `No pending tool call has the id ${r.tool_use_id}.`, {
      tool_use_id: r.tool_use_id,
    });
  // A reply under review (`pause_after_turn`): its calls wait for the review's `continue`, as a decision does. A
  // result now would start the run (nothing else missing) with the turn still under review.
  if (step.turn)
    throw conflict(
      'tool_result_not_expected',
      `The reply is under review (review_turn): its tool call ${r.tool_use_id} takes a result after POST …/continue.`,
    );
  const result: ToolResult = { content: r.content, is_error: r.is_error ?? false };
  if (step.review && call.result) {
    return ['tool_result.replaced', setEncodedResult(call, result).event];
  }
  // A call that waits for its decision (a sub-agent's is a client call) takes none, as a server call does: its
  // result would stand whatever the decision (a later deny, an edited input). A denied one is answered by its denial.
  if (!call.result && call.approval === 'required')
    throw conflict(
      'tool_result_not_expected',
      `The call ${r.tool_use_id} waits for a decision (approve_tool_calls); it takes no result now.`,
    );
  if (!call.result && call.approval === 'denied')
    throw conflict(
      'tool_result_not_expected',
      `The call ${r.tool_use_id} was denied; its denial is its result.`,
    );
  if (call.kind === 'client' && !call.result) {
    return ['tool_result.submitted', setEncodedResult(call, result).event];
  }
  if (call.result)
    throw conflict('tool_result_already_submitted', `The call ${r.tool_use_id} already has its result.`);
  throw conflict(
    'tool_result_not_expected',
    `The call ${r.tool_use_id} is a server tool call that has not run; it takes no result now.`,
  );
}

/**
 * Results of client tools, or replacements of results under review. The run goes on once nothing else waits:
 * at once for client results, on `go` (or `continue`) for reviewed ones.
 */
/** One client tool's result (`PUT …/tool-results/:id`, a WebSocket frame): `submitResults` without `continue`. */
export function putResult(
  deps: SessionDeps,
  tenant: string,
  id: string,
  toolUseId: string,
  body: z.infer<typeof toolResultBody>,
  ifMatch?: number,
): Promise<MutationResult> {
  return submitResults(deps, tenant, id, [{ tool_use_id: toolUseId, ...body }], false, ifMatch);
}

export function submitResults(
  deps: SessionDeps,
  tenant: string,
  id: string,
  results: ResultInput[],
  go: boolean,
  ifMatch?: number,
  /** The service's own answer (a sub-agent's result), not a client's. */
  service = false,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s) => {
    const ids = results.map((r) => r.tool_use_id);
    assertActionOpen(s, deps.store.clock.now(), ids);
    assertCallsOpen(s, ids);
    if (s.status !== 'requires_action' || !s.pending) {
      throw conflict('nothing_awaits_results', `The session is ${s.status}; no tool result is expected.`);
    }
    // The service's own answer (an ended child's, which the agents' sweep gives again at each look) never replaces
    // a result the call has: under review, that is the reviewer's to replace.
    if (service && results.every((r) => s.pending?.calls.find((c) => c.id === r.tool_use_id)?.result))
      throw conflict('tool_result_already_submitted', 'The call already has its result.');
    const step = structuredClone(s.pending);
    const events = results.map((r) => applyResult(step, r));
    // A client's results that would take the step's past MAX_TURN_BYTES together: refused before anything is written
    // (a run slot, a due entry). The write checks again (`resultsCap`), for results written at once. Counted without
    // encoding a result again: the stored ones by their fields' sizes as read, the new ones as encoded above.
    const max = deps.store.maxTurnBytes;
    if (!service) {
      const bytes = resultsBytes(step.calls);
      if (bytes > max && bytes > resultsBytes(s.pending.calls)) throw resultsTooLarge(bytes, max);
    }
    // The service's own answer past MAX_TURN_BYTES with the step's other results becomes an error saying so (a
    // client's is refused at the write: 413, `resultsCap`); its event tells of the result as set.
    if (service)
      for (const c of fitResults(step.calls, new Set(ids), max)) {
        const at = ids.indexOf(c.id);
        const ev = events[at];
        if (ev && c.result) events[at] = [ev[0], encodeResult(c.id, c.result).event];
      }
    // The step's last result, every other one in: a review the policy asks for begins now, as the run would begin it
    // at once (tool-step.ts `holdResults`), without a run (`continue: true` does not skip it, there either).
    if (step.calls.every((c) => c.result) && heldForReview(s, step))
      return {
        ops: reviewOps(deps, s, step, events),
        starts: false,
        costCap: false,
        ...(service ? { storageCap: false, resultsCap: false } : {}),
      };
    // Client results alone let the run go on; reviewed results wait for `continue`.
    const goes = ready(step) && (go || !step.review);
    const st = goes
      ? runOps(s, { pending: step })
      : statusOps(s, { status: 'requires_action', pending: step });
    return {
      ops: {
        ...st,
        events: [...events, ...(st.events ?? [])],
      },
      starts: goes,
      // Results answer the step the run waits on (no new run): they land over the tenant's daily cap, and the run
      // stops after the step's tool results, before its next model request (`tenant_budget_exhausted`).
      costCap: false,
      // The service's own answer (a sub-agent's result) lands whatever the model's price too: the run it starts fails
      // before its model request for a model without a price under a dollar ceiling (`unknown_model_price`: the
      // engine checks); nor is it refused at TENANT_MAX_BYTES, nor past MAX_TURN_BYTES (fitted above).
      ...(service ? { priced: false, storageCap: false, resultsCap: false } : {}),
    };
  });
}

/**
 * The step paused at `review_tool_results`, as the run's tool step pauses it (tool-step.ts `holdResults`, commit.ts
 * `endOps`): `step.review` set, the calls not announced yet announced (`tool.completed`: the client's, without a
 * duration), and the new action's deadline counted from Redis's now.
 */
function reviewOps(
  deps: SessionDeps,
  s: SessionState,
  step: PendingStep,
  events: Array<[string, string]>,
): ApplyOps {
  step.review = true;
  const deadline = deadlineFields(s.actionTimeoutS, deps.store.clock.now());
  const completed = completedEvents(step.calls, new Map());
  const due = Number(deadline['act_due']) || null;
  const st = statusOps({ ...s, action: { ...s.action, due } }, { status: 'requires_action', pending: step });
  return {
    ...st,
    hset: { ...st.hset, ...deadline },
    events: [...events, ...completed, ...(st.events ?? [])],
  };
}

async function endsWithTurnToSend(deps: SessionDeps, id: string): Promise<boolean> {
  const last = await deps.store.lastMessage(id);
  return last !== null && (last.role === 'user' || pendingToolCalls([last]).length > 0);
}

/**
 * Lets a paused run go on: results or a reply under review accepted (whatever the session's budget: the run stops
 * after the step's tool results), or a new run after `max_iterations` or a budget stop (budget left needed).
 */
export function continueRun(
  deps: SessionDeps,
  tenant: string,
  id: string,
  ifMatch?: number,
): Promise<MutationResult> {
  return mutate(deps, tenant, id, ifMatch, async (s: SessionState) => {
    assertActionOpen(s, deps.store.clock.now());
    if (s.status === 'idle') {
      // A new run on an idle session sends a turn (or runs a given reply's calls and then sends one): it needs budget
      // left. One that waits for its client (below) goes on with its step whatever the budget: as a decision or a
      // result does, it runs that step's calls and stops before its next turn (`budget_exhausted`).
      assertBudgetLeft(s);
      if (
        s.stopReason === 'max_iterations' ||
        s.stopReason === BUDGET_EXHAUSTED ||
        s.stopReason === TENANT_BUDGET_EXHAUSTED
      ) {
        // After a budget stop (the budget raised since: checked above), the run goes on from where it stopped.
        // A fresh iteration budget: the run goes on from the tool results it stopped after.
        return { ops: runOps(s), starts: true };
      }
      // A history given by `PUT …/messages` (or at create, not started) and not run since, that ends where the
      // runner would go on — a user turn, or a reply whose calls are not answered (`setMessagesParams` keeping the
      // reply under review): as the runner does, the calls run and the next turn is sent. A run's own stop is not
      // continued.
      const given = recordCount(s) === Math.max(0, s.replacedAt);
      if (given && (await endsWithTurnToSend(deps, s.id))) return { ops: runOps(s), starts: true };
    }
    if (s.status !== 'requires_action' || !s.pending)
      throw conflict('nothing_to_continue', `The session is ${s.status}.`);
    // From here on `continue` answers the step the run waits on: no new run, so the tenant's daily cap does not
    // refuse it (spec §7.4). The run runs the step's calls and stops before its next model request
    // (`tenant_budget_exhausted`), as it would have, had the step needed no client.
    const { turn, ...step } = s.pending;
    if (turn) {
      // A reviewed reply (`pause_after_turn`): as the runner goes on, its calls are run (with their approvals and
      // client results as usual), and a reply without calls ends the run with its stop reason. With no follow-up
      // queued (one posted while the turn ran is sent next) that run sends nothing, so a model's price does not
      // stand in its way (one queued after this read: the run fails before sending it, `unknown_model_price`, as the
      // engine checks every model request).
      if (step.calls.length) return { ops: runOps(s, { pending: step }), starts: true, costCap: false };
      const ends = { pending: null, stopReason: turn.stop_reason ?? 'end_turn' };
      const sends = (await deps.store.queueLength(s.id)) > 0;
      return { ops: runOps(s, ends), starts: true, costCap: false, ...(sends ? {} : { priced: false }) };
    }
    if (!ready(s.pending)) {
      throw conflict('tool_calls_undecided', 'Some calls still wait for a decision or a client result.', {
        required_action: sessionView(s).required_action,
      });
    }
    return {
      ops: runOps(s, { pending: { ...s.pending, review: true } }),
      starts: true,
      costCap: false,
    };
  });
}
