import type { ServerTool } from '../../tools/types.js';
import type { ToolCall } from '../history.js';
import { isMcpToolset } from '../mcp/schema.js';
import { isAnthropicTool, runsOnClient } from '../tools/anthropic-tools.js';
import { isAgentTool } from '../schemas.js';
import { setResult, type PendingCall, type PendingStep, type ToolResult } from '../store/pending.js';
import type { SessionState } from '../store/session-state.js';
import { inputViolations } from './client-validation.js';

/**
 * Whether a call waits for approve/deny/edit under the session's `approval` policy. Client tools never do; a
 * sub-agent's call (a client call the service answers: it creates a child session, which spends the tree's budget)
 * does under `always` or a list naming it (`agentNeedsApproval`).
 */
export function needsApproval(
  s: Pick<SessionState, 'approval'>,
  name: string,
  tool: ServerTool | undefined,
): boolean {
  if (!tool) return false;
  if (s.approval === 'never') return false;
  if (s.approval === 'always') return true;
  if (s.approval === 'default') return tool.requiresApproval;
  return s.approval.includes(name);
}

/** Whether a call of the session's sub-agent `name` waits for a decision: `always`, or a list naming it (its default: no). */
function agentNeedsApproval(s: Pick<SessionState, 'approval' | 'tools'>, name: string): boolean {
  if (s.approval === 'never' || s.approval === 'default') return false;
  if (!s.tools.some((t) => isAgentTool(t) && t.name === name)) return false;
  return s.approval === 'always' || s.approval.includes(name);
}

/** Whether a call may run again after a crash interrupted it: by its input where the tool says, else the tool's flag. */
export function callIdempotent(tool: ServerTool | undefined, input: unknown): boolean {
  if (!tool) return false;
  return tool.idempotentFor ? tool.idempotentFor(input) : tool.idempotent;
}

/** Whether the results of the calls wait for review before the model sees them. */
export function needsReview(s: Pick<SessionState, 'review'>, calls: Array<{ name: string }>): boolean {
  if (calls.length === 0) return false;
  if (s.review === true) return true;
  if (s.review === false) return false;
  const names = s.review;
  return calls.some((c) => names.includes(c.name));
}

/**
 * Whether a step whose results are known pauses at `review_tool_results` before the model sees them: it was not
 * accepted already (`step.review`), no server call failed under `on_tool_error: "fail"` (the session fails instead),
 * and `review_tool_results` names one of its non-denied server calls or one of them failed under `"pause"`. Decided
 * by the run's tool step (tool-step.ts `holdResults`), and by a client's last result of a step whose other results
 * are all in (sessions/tool-calls.ts: the step pauses without a run).
 */
export function heldForReview(s: Pick<SessionState, 'review' | 'onToolError'>, step: PendingStep): boolean {
  if (step.review) return false;
  const serverResults = step.calls.filter((c) => c.kind === 'server' && c.approval !== 'denied');
  const failed = serverResults.some((c) => c.result?.is_error);
  if (failed && s.onToolError === 'fail') return false;
  return needsReview(s, serverResults) || (failed && s.onToolError === 'pause');
}

/** Tools whose calls a client answers: client tools, and Anthropic-defined tools a client runs (bash, …). */
export function clientToolNames(s: Pick<SessionState, 'tools'>): Set<string> {
  return new Set(
    s.tools.flatMap((t) => {
      if (typeof t !== 'object' || isMcpToolset(t)) return [];
      if (isAnthropicTool(t)) return runsOnClient(t) ? [t.name] : [];
      return 'input_schema' in t ? [t.name] : [];
    }),
  );
}

/**
 * The pending step for the calls of a reply, before anything ran. `tools` are the session's runnable tools (server
 * tools, MCP tools, …: `Toolbox.forSession`); a call to any other name that is not a client tool runs as a server
 * call and is answered "not found".
 */
export function pendingCalls(
  s: Pick<SessionState, 'tools' | 'approval' | 'tenant'>,
  calls: ToolCall[],
  tools: ReadonlyMap<string, ServerTool>,
): PendingCall[] {
  const client = clientToolNames(s);
  const checked = validatedSchemas(s);
  return calls.map((c) => {
    const isClient = client.has(c.name);
    const tool = isClient ? undefined : tools.get(c.name);
    const call: PendingCall = {
      id: c.id,
      name: c.name,
      input: c.input,
      kind: isClient ? 'client' : 'server',
      approval: (isClient ? agentNeedsApproval(s, c.name) : needsApproval(s, c.name, tool))
        ? 'required'
        : 'auto',
      ...(tool?.runner ? { runner: tool.runner } : {}),
    };
    // A client tool with `validate: true` and an input its schema refuses: answered now, the client never waits.
    const schema = isClient ? checked.get(c.name) : undefined;
    const violations = schema ? inputViolations(s.tenant, schema, c.input) : null;
    if (violations) setResult(call, { content: violations, is_error: true });
    return call;
  });
}

/** The input schemas of the session's client tools with `validate: true`, by name. */
export function validatedSchemas(s: Pick<SessionState, 'tools'>): Map<string, Record<string, unknown>> {
  const out = new Map<string, Record<string, unknown>>();
  for (const t of s.tools) {
    if (typeof t !== 'object' || isAnthropicTool(t) || isMcpToolset(t) || !('input_schema' in t)) continue;
    if (t.validate === true) out.set(t.name, t.input_schema);
  }
  return out;
}

export const interruptedResult = (why: string): ToolResult => ({ content: `Error: ${why}`, is_error: true });
