/**
 * Request validation as the real API does it: the body's fields (`validateBody`) and the conversation's shape
 * (`validateConversation`: roles, content blocks, `tool_use` / `tool_result` pairing). A failed check throws a
 * `RequestError` carrying the API error to answer with.
 */
import type http from 'node:http';
import {
  compactionBlockProblem,
  compactionSummaryOf,
  conversationStart,
} from '../../src/offline/compaction-block.js';
import { unchecked, type Unchecked } from '../../src/offline/unchecked.js';
import {
  MESSAGE_THREADS_BETA,
  SERVER_SIDE_FALLBACK_BETA,
  SERVER_TOOL_RESULT_TYPES,
  type ApiErrorSpec,
} from '../../src/offline/wire.js';

/** Results of calls the API makes itself: server tools', and the MCP connector's `mcp_tool_result`. */
const SERVER_RESULT_TYPES: ReadonlySet<string> = new Set([...SERVER_TOOL_RESULT_TYPES, 'mcp_tool_result']);
/** Calls the API makes itself: `server_tool_use`, and the MCP connector's `mcp_tool_use`. */
const SERVER_CALL_TYPES: ReadonlySet<string> = new Set(['server_tool_use', 'mcp_tool_use']);

/**
 * A server tool block (`server_tool_use`, or a result such as `web_search_tool_result`) as the API checks it: only in
 * assistant turns, a call with an id (unique among all tool calls) and a name, a result answering a call made earlier
 * in the same turn (a paused turn and its continuation are one turn, as consecutive assistant messages combine).
 */
function checkServerBlock(
  block: Unchecked<'type' | 'id' | 'name' | 'input' | 'tool_use_id'>,
  role: string,
  turnCalls: Set<string>,
  seenIds: Set<string>,
  at: string,
): void {
  if (role !== 'assistant')
    throw invalid(`${at}: \`${String(block.type)}\` blocks may only appear in assistant messages`);
  if (SERVER_CALL_TYPES.has(String(block.type))) {
    if (typeof block.id !== 'string' || typeof block.name !== 'string')
      throw invalid(`${at}: \`${String(block.type)}\` blocks need an \`id\` and a \`name\``);
    if (!unchecked(block.input)) throw invalid(`${at}.input: Input should be a valid dictionary`);
    if (seenIds.has(block.id)) throw invalid(`${at}: tool use ids must be unique, found ${block.id} again`);
    seenIds.add(block.id);
    turnCalls.add(block.id);
    return;
  }
  if (typeof block.tool_use_id !== 'string' || !turnCalls.has(block.tool_use_id))
    throw invalid(
      `${at}: \`${String(block.type)}\` block with tool_use_id ${String(block.tool_use_id)} has no corresponding \`${block.type === 'mcp_tool_result' ? 'mcp_tool_use' : 'server_tool_use'}\` block before it`,
    );
}

/** A request the fake refuses, with the API error it answers. */
export class RequestError extends Error {
  constructor(readonly spec: ApiErrorSpec) {
    super(spec.message);
  }
}

export function invalid(message: string): RequestError {
  return new RequestError({ status: 400, type: 'invalid_request_error', message });
}

/** Checks the body's fields as the API does (the conversation is checked by `validateConversation`). */
/** The fields of a custom tool definition (the SDK's `BetaTool`); the API refuses any other. */
const CUSTOM_TOOL_KEYS = new Set([
  'name',
  'input_schema',
  'allowed_callers',
  'cache_control',
  'defer_loading',
  'description',
  'eager_input_streaming',
  'input_examples',
  'strict',
  'type',
]);

/** A custom tool (`input_schema`, no other type) with a field the API does not know is refused, as the API does. */
function checkCustomToolKeys(raw: unknown, i: number): void {
  const tool = unchecked<'type' | 'input_schema'>(raw);
  if (!tool || tool.input_schema === undefined) return;
  if (tool.type !== undefined && tool.type !== null && tool.type !== 'custom') return;
  for (const key of Object.keys(tool)) {
    if (!CUSTOM_TOOL_KEYS.has(key)) throw invalid(`tools.${i}.custom.${key}: Extra inputs are not permitted`);
  }
}

/** The MCP connector's betas (`mcp_servers` + `mcp_toolset`). */
const MCP_CLIENT_BETAS = ['mcp-client-2025-11-20', 'mcp-client-2026-09-15'];

/**
 * The names of `mcp_servers` (Anthropic's MCP connector), checked as the API does: a list of
 * `{"type": "url", "name", "url"}` with unique names, only with an `mcp-client-…` beta.
 */
function mcpServerNames(raw: unknown, headers: http.IncomingHttpHeaders): Set<string> {
  const names = new Set<string>();
  if (raw === undefined) return names;
  const betas = String(headers['anthropic-beta'] ?? '')
    .split(',')
    .map((b) => b.trim());
  if (!betas.some((b) => MCP_CLIENT_BETAS.includes(b)))
    throw invalid(`mcp_servers: requires the \`anthropic-beta: ${MCP_CLIENT_BETAS[0]}\` header`);
  if (!Array.isArray(raw)) throw invalid('mcp_servers: Input should be a valid list');
  raw.forEach((s: unknown, i: number) => {
    const server = unchecked<'type' | 'name' | 'url'>(s);
    if (!server || server.type !== 'url') throw invalid(`mcp_servers.${i}.type: Input should be 'url'`);
    if (typeof server.name !== 'string' || !server.name)
      throw invalid(`mcp_servers.${i}.name: Field required`);
    if (typeof server.url !== 'string' || !/^https:\/\//.test(server.url))
      throw invalid(`mcp_servers.${i}.url: an https URL is required`);
    if (names.has(server.name))
      throw invalid(`mcp_servers.${i}: MCP server names must be unique: ${server.name}`);
    names.add(server.name);
  });
  return names;
}

/**
 * `fallbacks` (server-side fallback models), checked as the API does: only with its beta, `"default"` or a list of
 * `{"model", …}`. The fake serves no fallback of its own: a script's reply says one served it (its `model`, and a
 * `fallback_message` entry in `usage.iterations`).
 */
function checkFallbacks(raw: unknown, headers: http.IncomingHttpHeaders): void {
  if (raw === undefined) return;
  const betas = String(headers['anthropic-beta'] ?? '')
    .split(',')
    .map((b) => b.trim());
  if (!betas.includes(SERVER_SIDE_FALLBACK_BETA))
    throw invalid(`fallbacks: requires the \`anthropic-beta: ${SERVER_SIDE_FALLBACK_BETA}\` header`);
  if (raw === 'default') return;
  if (!Array.isArray(raw)) throw invalid("fallbacks: Input should be a valid list or 'default'");
  raw.forEach((f: unknown, i: number) => {
    const model = unchecked<'model'>(f)?.model;
    if (typeof model !== 'string' || !model) throw invalid(`fallbacks.${i}.model: Field required`);
  });
}

/** An `mcp_toolset` names a server of `mcp_servers`. */
function checkMcpToolset(raw: unknown, i: number, servers: ReadonlySet<string>): void {
  const tool = unchecked<'type' | 'mcp_server_name'>(raw);
  if (tool?.type !== 'mcp_toolset') return;
  if (typeof tool.mcp_server_name !== 'string' || !servers.has(tool.mcp_server_name))
    throw invalid(
      `tools.${i}.mcp_toolset.mcp_server_name: ${String(tool.mcp_server_name)} is not a server of mcp_servers`,
    );
}

export function validateBody(raw: unknown, headers: http.IncomingHttpHeaders): void {
  const body = unchecked<
    | 'model'
    | 'max_tokens'
    | 'messages'
    | 'stream'
    | 'tools'
    | 'thread'
    | 'system'
    | 'mcp_servers'
    | 'fallbacks'
  >(raw);
  if (!body) throw invalid('The request body must be a JSON object');
  if (body.model === undefined) throw invalid('model: Field required');
  if (typeof body.model !== 'string' || !body.model) throw invalid('model: Input should be a valid string');
  if (body.max_tokens === undefined) throw invalid('max_tokens: Field required');
  if (typeof body.max_tokens !== 'number' || !Number.isInteger(body.max_tokens)) {
    throw invalid('max_tokens: Input should be a valid integer');
  }
  if (body.max_tokens < 1) throw invalid('max_tokens: Input should be greater than or equal to 1');
  if (body.messages === undefined) throw invalid('messages: Field required');
  if (!Array.isArray(body.messages)) throw invalid('messages: Input should be a valid list');
  if (body.stream !== undefined && typeof body.stream !== 'boolean') {
    throw invalid('stream: Input should be a valid boolean');
  }
  checkFallbacks(body.fallbacks, headers);
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) throw invalid('tools: Input should be a valid list');
    const names = new Set<string>();
    const mcpServers = mcpServerNames(body.mcp_servers, headers);
    body.tools.forEach((tool: unknown, i: number) => {
      checkCustomToolKeys(tool, i);
      checkMcpToolset(tool, i, mcpServers);
      const name = unchecked<'name'>(tool)?.name;
      if (typeof name !== 'string') return; // server tools of some types have no name
      if (names.has(name)) throw invalid(`tools.${i}: Tool names must be unique: ${name}`);
      names.add(name);
    });
  }
  if (body.thread === undefined || body.thread === null) {
    if (body.messages.length === 0) throw invalid('messages: at least one message is required');
    return;
  }
  const thread = unchecked<'type' | 'previous_message_id'>(body.thread);
  if (!thread || (thread.type !== 'create' && thread.type !== 'continue')) {
    throw invalid("thread.type: Input should be 'create' or 'continue'");
  }
  const betas = String(headers['anthropic-beta'] ?? '')
    .split(',')
    .map((beta) => beta.trim());
  if (!betas.includes(MESSAGE_THREADS_BETA)) {
    throw invalid(`thread: requires the \`anthropic-beta: ${MESSAGE_THREADS_BETA}\` header`);
  }
  if (thread.type === 'create') {
    if (body.messages.length === 0) throw invalid('messages: at least one message is required');
    return;
  }
  if (typeof thread.previous_message_id !== 'string' || !thread.previous_message_id) {
    throw invalid('thread.previous_message_id: Field required');
  }
  for (const field of ['system', 'tools'] as const) {
    if (body[field] !== undefined) {
      throw invalid(
        `${field}: cannot be set on a thread \`continue\`; the thread keeps the \`${field}\` it was created with`,
      );
    }
  }
}

/**
 * Checks a conversation as the real API does. Consecutive messages of one role form a single turn (the API combines
 * them) unless `strict`; `system`-role messages (`tool_addition` / `tool_removal`) are skipped. The model reads from
 * the last compaction block with a summary on (an assistant message, which may then come first): the messages before
 * it are checked only for their shape, and what follows it must be a valid conversation from there.
 */
export function validateConversation(messages: readonly unknown[], strict = false): void {
  interface Turn {
    role: 'user' | 'assistant';
    first: number;
    toolUses: Map<string, number>;
    results: Array<{ id: unknown; message: number; block: number }>;
    /** `server_tool_use` ids of the turn so far: a result block answers one before it in the same turn. */
    serverUses: Set<string>;
    /** Those without a result yet: only the last turn may leave one open (a paused turn the API resumes). */
    serverOpen: Set<string>;
  }
  const turns: Turn[] = [];
  const seenToolUse = new Set<string>();
  const start = conversationStart(messages);
  let lastNonSystem = -1;
  messages.forEach((message, i) => {
    if (unchecked<'role'>(message)?.role !== 'system') lastNonSystem = i;
  });

  messages.forEach((raw, i) => {
    const message = unchecked<'role' | 'content'>(raw);
    if (!message) throw invalid(`messages.${i}: Input should be an object`);
    const { role, content } = message;
    if (role !== 'user' && role !== 'assistant' && role !== 'system') {
      throw invalid(`messages.${i}.role: Input should be 'user', 'assistant' or 'system'`);
    }
    if (typeof content !== 'string' && !Array.isArray(content)) {
      throw invalid(`messages.${i}.content: Input should be a valid string or list of content blocks`);
    }
    if (role === 'system') return;
    const empty = typeof content === 'string' ? content.length === 0 : content.length === 0;
    if (empty && !(role === 'assistant' && i === lastNonSystem)) {
      throw invalid(
        `messages.${i}: all messages must have non-empty content except for the optional final assistant message`,
      );
    }
    if (Array.isArray(content)) {
      content.forEach((block: unknown, j: number) => {
        if (unchecked<'type'>(block)?.type !== 'compaction') return;
        const problem = compactionBlockProblem(role, i, j, block);
        if (problem) throw invalid(problem);
      });
    }
    // Before the last compaction the API reads nothing: only the shape of those messages is checked.
    if (i < start) return;
    let turn = turns.at(-1);
    const afterCompaction = i > 0 && compactionSummaryOf(messages[i - 1]) !== undefined;
    if (!turn) {
      // A compaction block stands for the conversation before it, so its assistant message may come first.
      if (role !== 'user' && compactionSummaryOf(raw) === undefined) {
        throw invalid(`messages.${i}: first message must use the "user" role`);
      }
    } else if (turn.role === role && strict && !afterCompaction) {
      throw invalid(
        `messages.${i}: roles must alternate between "user" and "assistant", but found multiple "${role}" roles in a row`,
      );
    }
    if (!turn || turn.role !== role) {
      turn = {
        role,
        first: i,
        toolUses: new Map(),
        results: [],
        serverUses: new Set(),
        serverOpen: new Set(),
      };
      turns.push(turn);
    }
    if (typeof content === 'string') return;
    content.forEach((rawBlock: unknown, j: number) => {
      const block = unchecked<'type' | 'text' | 'id' | 'name' | 'input' | 'tool_use_id'>(rawBlock);
      if (!block || typeof block.type !== 'string') {
        throw invalid(`messages.${i}.content.${j}: Input should be a content block with a \`type\``);
      }
      if (block.type === 'text' && typeof block.text !== 'string') {
        throw invalid(`messages.${i}.content.${j}.text: Field required`);
      }
      if (block.type === 'tool_use') {
        if (role !== 'assistant') {
          throw invalid(
            `messages.${i}.content.${j}: \`tool_use\` blocks may only appear in assistant messages`,
          );
        }
        if (typeof block.id !== 'string' || typeof block.name !== 'string') {
          throw invalid(`messages.${i}.content.${j}: \`tool_use\` blocks need an \`id\` and a \`name\``);
        }
        if (!unchecked(block.input)) {
          throw invalid(`messages.${i}.content.${j}.input: Input should be a valid dictionary`);
        }
        if (seenToolUse.has(block.id)) {
          throw invalid(
            `messages.${i}.content.${j}: \`tool_use\` ids must be unique, found ${block.id} again`,
          );
        }
        seenToolUse.add(block.id);
        turn.toolUses.set(block.id, i);
      }
      if (SERVER_CALL_TYPES.has(block.type) || SERVER_RESULT_TYPES.has(block.type)) {
        checkServerBlock(block, role, turn.serverUses, seenToolUse, `messages.${i}.content.${j}`);
        if (SERVER_CALL_TYPES.has(block.type)) turn.serverOpen.add(String(block.id));
        else turn.serverOpen.delete(String(block.tool_use_id));
      }
      if (block.type === 'tool_result') {
        if (role !== 'user') {
          throw invalid(
            `messages.${i}.content.${j}: \`tool_result\` blocks may only appear in user messages`,
          );
        }
        turn.results.push({ id: block.tool_use_id, message: i, block: j });
      }
    });
  });

  turns.forEach((turn, t) => {
    if (turn.role === 'assistant' && t < turns.length - 1 && turn.serverOpen.size) {
      throw invalid(
        `messages.${turn.first}: \`server_tool_use\` ids were found without a result block in the same turn: ${[...turn.serverOpen].join(', ')}. A turn may end with an unanswered server tool call only as the last message, which the API resumes.`,
      );
    }
    if (turn.role !== 'user') return;
    const previous = t > 0 ? turns[t - 1] : undefined;
    const answered = new Set<unknown>();
    for (const result of turn.results) {
      if (!previous || typeof result.id !== 'string' || !previous.toolUses.has(result.id)) {
        throw invalid(
          `messages.${result.message}.content.${result.block}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(result.id)}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`,
        );
      }
      if (answered.has(result.id)) {
        throw invalid(
          `messages.${result.message}.content.${result.block}: each \`tool_use\` may be answered by one \`tool_result\` only, found ${String(result.id)} twice`,
        );
      }
      answered.add(result.id);
    }
    if (previous && previous.toolUses.size) {
      const missing = [...previous.toolUses.keys()].filter((id) => !answered.has(id));
      if (missing.length) {
        throw invalid(
          `messages.${turn.first}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`,
        );
      }
    }
  });
}

export { unchecked, type Unchecked } from '../../src/offline/unchecked.js';
