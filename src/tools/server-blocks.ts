/**
 * The content blocks of Anthropic server tools in a history: `server_tool_use` (the model calls a tool the API runs)
 * and its result block (`web_search_tool_result`, …), and likewise the MCP connector's `mcp_tool_use` and
 * `mcp_tool_result`, all in assistant turns. Checked as the Messages API checks them: a result answers a call before
 * it in the same assistant turn, ids are unique, and a call is left without its result only at the very end (a turn
 * paused with `pause_turn`, which the next request continues).
 */
import { z } from 'zod';

/** The result block types of the SDK's `BetaContentBlockParam` (one per server tool family). */
export const SERVER_TOOL_RESULT_TYPES = [
  'web_search_tool_result',
  'web_fetch_tool_result',
  'code_execution_tool_result',
  'bash_code_execution_tool_result',
  'text_editor_code_execution_tool_result',
  'tool_search_tool_result',
  'advisor_tool_result',
] as const;

const RESULT_TYPES: ReadonlySet<string> = new Set(SERVER_TOOL_RESULT_TYPES);

const blockId = z.string().regex(/^[A-Za-z0-9_-]{1,128}$/);
const cacheControl = z.strictObject({ type: z.literal('ephemeral'), ttl: z.enum(['5m', '1h']).optional() });

/** A `server_tool_use` block; `caller` and fields the API may add pass through. */
export const serverBlock = z.looseObject({
  type: z.literal('server_tool_use'),
  id: blockId,
  name: z.string().regex(/^[A-Za-z0-9_-]{1,128}$/),
  input: z.record(z.string(), z.unknown()),
  cache_control: cacheControl.nullish(),
});

/** A server tool's result block: its content is the API's (search results, fetched documents, code output…). */
export const serverToolResultBlock = z.looseObject({
  type: z.enum(SERVER_TOOL_RESULT_TYPES),
  tool_use_id: blockId,
  content: z.unknown(),
  cache_control: cacheControl.nullish(),
});

/** The fields of a stored block that the check reads. */
interface BlockLike {
  type: string;
  id?: string | undefined;
  tool_use_id?: string | undefined;
}

/*
 * Anthropic's MCP connector pairs its blocks as server tools do: `mcp_tool_use` (a call the API makes) answered by
 * `mcp_tool_result` later in the same assistant turn.
 */
const isCall = (type: string): boolean => type === 'server_tool_use' || type === 'mcp_tool_use';
const isResult = (type: string): boolean => RESULT_TYPES.has(type) || type === 'mcp_tool_result';
const callOf = (result: string): string =>
  result === 'mcp_tool_result' ? 'mcp_tool_use' : 'server_tool_use';

/**
 * Problems of the server tool blocks of a history, as `[message index, text]`. `turns` are the messages in order with
 * their role and blocks; consecutive assistant messages (a paused turn and its continuation) form one turn, as the
 * API combines them.
 */
export function serverBlockProblems(
  turns: ReadonlyArray<{ role: string; blocks: readonly BlockLike[] }>,
): Array<[number, string]> {
  const problems: Array<[number, string]> = [];
  const seen = new Set<string>();
  /** Calls of the current assistant turn not answered yet, by id → message index. */
  let open = new Map<string, number>();
  const closeTurn = () => {
    for (const [id, index] of open)
      problems.push([index, `server tool call ${id} has no result block in its assistant turn`]);
    open = new Map();
  };
  turns.forEach((m, index) => {
    if (m.role !== 'assistant') {
      closeTurn();
      for (const b of m.blocks)
        if (isCall(b.type) || isResult(b.type))
          problems.push([index, `${b.type} blocks belong in assistant turns`]);
      return;
    }
    for (const b of m.blocks) {
      if (isCall(b.type)) {
        const id = String(b.id);
        if (seen.has(id)) problems.push([index, `${b.type} id ${id} is used twice`]);
        seen.add(id);
        open.set(id, index);
      } else if (isResult(b.type)) {
        const id = String(b.tool_use_id);
        if (!open.delete(id))
          problems.push([index, `${b.type} ${id} answers no ${callOf(b.type)} before it in its turn`]);
      }
    }
  });
  // A call still open at the very end is a paused turn (`pause_turn`): the next request continues it.
  return problems;
}

/**
 * `content` (one reply) without the calls the API makes (server tools, the MCP connector) that no block of it
 * answers: a reply that stopped mid-call (`max_tokens`, `refusal`, …) leaves them, the call never ran, and the API
 * refuses any turn after one. The same array when there is none.
 */
export function withoutOpenCalls<B extends BlockLike>(content: B[]): B[] {
  if (!content.some((b) => isCall(b.type))) return content;
  const answered = new Set(content.filter((b) => isResult(b.type)).map((b) => String(b.tool_use_id)));
  const open = (b: B) => isCall(b.type) && !answered.has(String(b.id));
  return content.some(open) ? content.filter((b) => !open(b)) : content;
}
