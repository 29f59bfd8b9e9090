/**
 * Policy `pause_after_turn` (the loop body of the SDK's `for await`): each finished reply is committed with a pending
 * step marked `turn`, before its calls run, and the session goes `requires_action` `{type: "review_turn", message}`.
 * The ways out are the routes': `continue` (src/sessions/tool-calls.ts) goes on as the runner would, `PUT …/messages`
 * takes over the history, `retry` sends the turn again, a message (src/sessions/messages.ts) answers the calls
 * "not run" and adds itself.
 */
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { ServerTool } from '../../tools/types.js';
import type { StoredMessage, ToolCall } from '../history.js';
import type { PendingStep } from '../store/pending.js';
import type { IterationRecord, SessionState } from '../store/session-state.js';
import { endRun, persistedEvent } from './commit.js';
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
    /** The turn's usage and cost as every turn counts them (server-side compaction included: turn-runner.ts). */
    usageIncrs: Record<string, number>;
  },
): Promise<void> {
  const { message, reply, calls, record } = turn;
  // A record made by this runner always has its number.
  const n = record.n ?? record.iteration;
  const step: PendingStep = {
    calls: message.stop_reason === 'tool_use' ? pendingCalls(state, calls, runnable) : [],
    review: false,
    iteration: record.iteration,
    record: n,
    turn: { content: message.content, stop_reason: message.stop_reason },
  };
  // Its review has a deadline too.
  const next = { status: 'requires_action' as const, pending: step, actionTimeoutS: state.actionTimeoutS };
  await endRun(deps, run, next, [], {
    push_msgs: [JSON.stringify(reply)],
    push_iters: [JSON.stringify(record)],
    hset: turn.carried,
    hincr: { iteration: 1, ...turn.usageIncrs },
    events: [...turn.events, persistedEvent(record.iteration, n)],
  });
}
