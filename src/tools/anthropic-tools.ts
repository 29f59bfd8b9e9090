/**
 * Anthropic-defined tools in a session's `tools`: `{"type": "<type>", "name", …}` entries sent to the Messages API as
 * they were given. Two families, both from the SDK's `BetaToolUnion`:
 * - server tools (web search, web fetch, code execution, advisor, tool search) run upstream: the model's reply holds
 *   their `server_tool_use` and result blocks, which the service persists and relays like any content;
 * - client-run tools (bash, text editor, computer) are called with ordinary `tool_use` blocks whose results a client
 *   submits, as for a client tool.
 * The memory tool is `"memory"` (the service runs it, src/memory/); toolsets (browser, computer, MCP) are not taken.
 */
import type { BetaToolUnion } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { z } from 'zod';

/** Server tool types, each with the one name the API accepts for it. */
const SERVER_TOOL_TYPES = {
  web_search_20250305: 'web_search',
  web_search_20260209: 'web_search',
  web_search_20260318: 'web_search',
  web_fetch_20250910: 'web_fetch',
  web_fetch_20260209: 'web_fetch',
  web_fetch_20260309: 'web_fetch',
  web_fetch_20260318: 'web_fetch',
  code_execution_20250522: 'code_execution',
  code_execution_20250825: 'code_execution',
  code_execution_20260120: 'code_execution',
  code_execution_20260521: 'code_execution',
  advisor_20260301: 'advisor',
  tool_search_tool_bm25_20251119: 'tool_search_tool_bm25',
  tool_search_tool_bm25: 'tool_search_tool_bm25',
  tool_search_tool_regex_20251119: 'tool_search_tool_regex',
  tool_search_tool_regex: 'tool_search_tool_regex',
} as const;

/** Anthropic-defined tools a client runs: the model calls them with `tool_use`, the session waits for the result. */
const CLIENT_RUN_TOOL_TYPES = {
  bash_20241022: 'bash',
  bash_20250124: 'bash',
  computer_20241022: 'computer',
  computer_20250124: 'computer',
  computer_20251124: 'computer',
  text_editor_20241022: 'str_replace_editor',
  text_editor_20250124: 'str_replace_editor',
  text_editor_20250429: 'str_replace_based_edit_tool',
  text_editor_20250728: 'str_replace_based_edit_tool',
} as const;

type ServerToolType = keyof typeof SERVER_TOOL_TYPES;
type ClientRunToolType = keyof typeof CLIENT_RUN_TOOL_TYPES;
// Compile-time check against the SDK: every type listed here is one of its `BetaToolUnion` members.
type Unknown = Exclude<ServerToolType | ClientRunToolType, BetaToolUnion['type']>;
const sdkKnowsEveryType: [Unknown] extends [never] ? true : never = true;
void sdkKnowsEveryType;

/** Largest Anthropic tool definition accepted, as JSON (UTF-16 code units). */
export const ANTHROPIC_TOOL_MAX_BYTES = 16_384;

interface ToolType {
  name: string;
  runs: 'upstream' | 'client';
}
const TYPES: ReadonlyMap<string, ToolType> = new Map<string, ToolType>([
  ...Object.entries(SERVER_TOOL_TYPES).map(([t, name]): [string, ToolType] => [
    t,
    { name, runs: 'upstream' },
  ]),
  ...Object.entries(CLIENT_RUN_TOOL_TYPES).map(([t, name]): [string, ToolType] => [
    t,
    { name, runs: 'client' },
  ]),
]);

/**
 * A `tools` entry with a `type`: one of the types above, with its name, at most `ANTHROPIC_TOOL_MAX_BYTES` as JSON.
 * The other fields pass through unchecked (the Messages API checks them); `memory_20250818` is refused with a pointer
 * to `"memory"`, which the service runs itself.
 */
export const anthropicToolEntry = z
  .looseObject({
    type: z.string().min(1).max(64),
    name: z.string().min(1).max(128),
  })
  .superRefine((t, ctx) => {
    const known = TYPES.get(t.type);
    if (!known) {
      // A sub-agent's entry lands here when it is not a valid one (schemas.ts `agentTool`): say what it lacks.
      const message =
        t.type === 'memory_20250818'
          ? 'the memory tool is given as the string "memory": the service runs it, with files kept per tenant'
          : t.type === 'agent'
            ? 'a sub-agent is {"type": "agent", "name", "description", "session": {…}} (`session`: a create body without `messages`, `input` or `start`), with no other fields'
            : `unknown Anthropic tool type "${t.type}"; GET /v1/tools lists the accepted types`;
      ctx.addIssue({ code: 'custom', path: ['type'], message });
      return;
    }
    if (t.name !== known.name)
      ctx.addIssue({ code: 'custom', path: ['name'], message: `a ${t.type} tool is named "${known.name}"` });
    const size = JSON.stringify(t).length;
    if (size > ANTHROPIC_TOOL_MAX_BYTES)
      ctx.addIssue({
        code: 'custom',
        message: `the definition is ${size} bytes as JSON; at most ${ANTHROPIC_TOOL_MAX_BYTES} are accepted`,
      });
  })
  .meta({
    description:
      'An Anthropic-defined tool (web search, web fetch, code execution, bash, text editor, …), sent as given.',
  });
export type AnthropicToolEntry = z.infer<typeof anthropicToolEntry>;

/** Whether a stored `tools` entry is an Anthropic-defined tool. */
export function isAnthropicTool(t: unknown): t is AnthropicToolEntry {
  return (
    typeof t === 'object' && t !== null && 'type' in t && typeof t.type === 'string' && TYPES.has(t.type)
  );
}

/** Whether an Anthropic tool is called with `tool_use` blocks that a client answers (bash, text editor, computer). */
export function runsOnClient(t: AnthropicToolEntry): boolean {
  return TYPES.get(t.type)?.runs === 'client';
}

/** The definition as the runner sends it: the entry, unchanged. */
export function anthropicToolDefinition(t: AnthropicToolEntry): BetaToolUnion {
  // Checked by `anthropicToolEntry` (a type and name of the SDK's union); its other fields pass through for the API.
  // Kept cast, a direct one: the compiler still checks that the entry's type overlaps the SDK's union.
  return t as BetaToolUnion;
}
