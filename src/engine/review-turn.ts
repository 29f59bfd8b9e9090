/**
 * Policy `pause_after_turn` (the loop body of the SDK's `for await`): each finished reply is committed with a pending
 * step marked `turn`, before its calls run, and the session goes `requires_action` `{type: "review_turn", message}`.
 * The ways out are the routes': `continue` (src/sessions/tool-calls.ts) goes on as the runner would, `PUT …/messages`
 * takes over the history, `retry` sends the turn again, a message (src/sessions/messages.ts) answers the calls
 * "not run" and adds itself.
 */
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { ServerTool } from '../../tools/types.js';
import { eventAtRevision } from '../events/schemas.js';
import type { StoredMessage, ToolCall } from '../history.js';
import type { PendingStep } from '../store/pending.js';
import { usageIncr, type IterationRecord, type SessionState } from '../store/session-state.js';
import { endRun } from './commit.js';
import { pendingCalls } from './policy.js';
import type { RunDeps, RunHandle } from './run-handle.js';

/** Whether this reply waits for review: the policy is on and the reply is finished (not `pause_turn`/`compaction`). */
export const reviewsTurn = (state: SessionState, unfinished: boolean): boolean =>
  state.pauseAfterTurn && !unfinished;

/**
 * Commits the reply with its review step and ends the run at `requires_action`. Its calls are those the runner would
 * run: the calls of a `tool_use` reply (with their approval state), none for a reply that stopped.
 */
export async function pauseForReview(
  deps: RunDeps,
  run: RunHandle,
  state: SessionState,
  runnable: ReadonlyMap<string, ServerTool>,
  turn: {
    message: BetaMessage;
    reply: StoredMessage;
    calls: ToolCall[];
    record: IterationRecord;
    events: Array<[string, string]>;
    carried: Record<string, string>;
  },
): Promise<void> {
  const { message, reply, calls, record } = turn;
  const step: PendingStep = {
    calls: message.stop_reason === 'tool_use' ? pendingCalls(state, calls, runnable) : [],
    review: false,
    iteration: record.iteration,
    turn: { content: message.content, stop_reason: message.stop_reason },
  };
  // The turn's cost counted with its usage, as every turn's (src/cost/prices.ts); its review has a deadline too.
  const costMicros = deps.store.spend.prices.turnCost(record.request.model, message.usage);
  const next = { status: 'requires_action' as const, pending: step, actionTimeoutS: state.actionTimeoutS };
  await endRun(deps, run, next, [], {
    push_msgs: [JSON.stringify(reply)],
    push_iters: [JSON.stringify(record)],
    hset: turn.carried,
    hincr: { iteration: 1, ...usageIncr(message.usage, costMicros) },
    events: [
      ...turn.events,
      eventAtRevision('iteration.persisted', { iteration: record.iteration, revision: null }),
    ],
  });
}
