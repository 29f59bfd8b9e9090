/**
 * The `run_tools_eagerly` policy: with streaming, the SDK runner's `runToolsEagerly` starts each tool call as soon as
 * the model has moved on from it (the next block starts, or the reply stops with `tool_use`), before the reply ends.
 *
 * Only calls that are safe to run twice start early: calls to the session's runnable tools (server tools, MCP tools
 * the server marks `idempotentHint` or `readOnlyHint`) that are idempotent and need no approval. Every other call (non-idempotent, approval required, a client tool, an unknown name) is held with
 * `runner.deferToolCall()` from a stream listener, which the SDK guarantees runs before the call could start, and
 * runs at `generateToolResponse()` as without the policy — after the reply is committed with its calls marked
 * `started`. So the crash rule holds unchanged: a crash, interrupt, cancel or shutdown mid-stream loses the reply,
 * and what may have run already is idempotent (the turn is sent again and may run it again); a non-idempotent call
 * never runs before the commit that records it, so it never runs twice.
 *
 * A started call's result is what `generateToolResponse()` returns for it (the SDK reuses it); one that throws is an
 * `is_error` result like any other, under `on_tool_error`. Calls of a reply that ends the runner instead (it waits for
 * an approval or a client, or stopped for another reason than `tool_use`) may have run early for nothing: their
 * results are dropped, and the tool step runs them again (they are idempotent).
 */
import type { BetaRawMessageStreamEvent } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { BetaMessage } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import type { ServerTool } from '../../tools/types.js';
import type { SessionState } from '../store/session-state.js';
import { clientToolNames, needsApproval } from './policy.js';

type EagerState = Pick<SessionState, 'tools' | 'approval' | 'runToolsEagerly' | 'stream'>;

/** The runner's setting: the SDK refuses `runToolsEagerly` without `stream` (a reply that isn't streamed arrives whole). */
export const runsToolsEagerly = (state: EagerState): boolean => state.runToolsEagerly && state.stream;

/**
 * Whether a call to `name` may start while the reply streams: one of the session's runnable tools (`tools`, as the
 * toolbox resolved them for this runner) that is idempotent and needs no approval. Never a client tool.
 */
export function startsEagerly(
  state: EagerState,
  name: string,
  tools: ReadonlyMap<string, ServerTool>,
): boolean {
  if (clientToolNames(state).has(name)) return false;
  const tool = tools.get(name);
  return !!tool && tool.idempotent && !needsApproval(state, name, tool);
}

/** What holding calls needs of the runner and of the turn's stream (the SDK's own methods). */
interface Runner {
  deferToolCall(toolUse: string): void;
}
interface TurnStream {
  on(
    event: 'streamEvent',
    listener: (event: BetaRawMessageStreamEvent, snapshot: BetaMessage) => void,
  ): unknown;
}

/**
 * Holds every call of the turn's reply that must not start early. Registered as soon as the runner yields the
 * stream, before any of its events; reads `state` at each call, so a PATCH taken at a turn boundary applies. Held
 * whatever the policy says (without `runToolsEagerly` holding does nothing), so the runner's setting alone decides.
 */
export function holdUnsafeCalls(
  runner: Runner,
  stream: TurnStream,
  state: EagerState,
  tools: ReadonlyMap<string, ServerTool>,
): void {
  stream.on('streamEvent', (event, snapshot) => {
    if (event.type !== 'content_block_stop') return;
    const block = snapshot.content[event.index];
    if (block?.type === 'tool_use' && !startsEagerly(state, block.name, tools)) {
      runner.deferToolCall(block.id);
    }
  });
}
