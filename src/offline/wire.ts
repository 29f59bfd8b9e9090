/**
 * The fake Messages API's types: what a test scripts (`FakeReply`), what the fake records (`FakeRequest`), and the
 * message it sends back on the wire (`WireMessage`). Every other file of the fake imports its types from here, so the
 * offline model, the scripts and the HTTP server do not import one another in a circle.
 */

import type {
  BetaContentBlockParam,
  BetaMessageParam,
  BetaRequestToolAdditionBlock,
  BetaRequestToolRemovalBlock,
  BetaServerToolUseBlockParam,
  MessageCreateParams,
} from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { SERVER_TOOL_RESULT_TYPES } from '../tools/server-blocks.js';

/** An entry of a compaction block's `tool_changes`. */
export type ToolChangeBlock = BetaRequestToolAdditionBlock | BetaRequestToolRemovalBlock;
/** The beta header a request needs to use message threads. */
export const MESSAGE_THREADS_BETA = 'message-threads-2026-08-12';
/** The beta header a request needs to name `fallbacks` (server-side fallback models). */
export const SERVER_SIDE_FALLBACK_BETA = 'server-side-fallback-2026-07-01';
/** The beta a compaction request (`compaction: {type: "summarize"}`) needs: the SDK's `compactBeforeNextTurn()`. */
export const COMPACTION_BETA = 'compact-2026-09-04';
/** The beta of server-side compaction (`context_management` with a `compact_20260112` edit). */
export const CONTEXT_COMPACTION_BETA = 'compact-2026-01-12';

/** The wires the fake answers (provider-wires.ts). */
export type WireName = 'anthropic' | 'bedrock' | 'vertex';

/** One recorded model request (`POST /v1/messages`, or the same on Vertex's or Bedrock's wire: provider-wires.ts). */
export interface FakeRequest {
  /**
   * The JSON body as received, typed as the API defines it. Only a request the fake accepted is known to match
   * (`validate.ts` checks it before any reply); one it answered 4xx may hold any JSON.
   */
  body: WireRequest;
  headers: Record<string, string | string[] | undefined>;
  /**
   * The full conversation the model saw: for a thread `continue` the stored conversation plus the new messages,
   * otherwise `body.messages`.
   */
  messages: BetaMessageParam[];
  /** Effective `system` (taken from the thread for a `continue`). */
  system: unknown;
  /** Effective `tools` (taken from the thread for a `continue`), `[]` when none. */
  tools: unknown[];
  stream: boolean;
  /** Size of the request body in bytes, as received (what the client sent upstream); set by the fake. */
  bytes?: number | undefined;
  /** `Date.now()` when the request was received. */
  at: number;
  /**
   * HTTP status the fake answered with: `undefined` while pending (or for a `hang`), 200 for a stream (even one cut
   * later), 0 when the socket was destroyed before any response.
   */
  status?: number | undefined;
  /** The `id` of the message the fake replied with, if it replied with one. */
  replyId?: string | undefined;
  /** The wire it came on (`/v1/messages`, Vertex's `:rawPredict`, Bedrock's `invoke`); set by the fake. */
  wire?: WireName | undefined;
  /** Its URL path; set by the fake. */
  path?: string | undefined;
}

export interface FakeUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  /** Server tool requests of the reply, when it made any (as the API counts them). */
  server_tool_use?: { web_search_requests: number; web_fetch_requests: number } | undefined;
  /** The cache writes split by TTL (default: all of `cache_creation_input_tokens` as 5-minute writes). */
  cache_creation?: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number } | undefined;
  /**
   * The sampling iterations (`BetaIterationsUsage`): a server-side compaction's entry (`type: "compaction"`), whose
   * tokens are not in the top-level fields, as the API reports it; a reply a fallback model served ends with that
   * model's `fallback_message` entry (after a `message` entry of each model that declined), whose tokens are in
   * them. Streamed in `message_delta` only.
   */
  iterations?: FakeIterationUsage[] | undefined;
}

export interface FakeIterationUsage {
  type: 'compaction' | 'message' | 'fallback_message';
  /** The model of a `message` (null: not said) or `fallback_message` entry; a compaction's has none. */
  model?: string | null | undefined;
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number } | null;
}

/** The stop reasons the API documents; a script may also give any other string (a reason a client does not know). */
export type FakeStopReason =
  | 'end_turn'
  | 'tool_use'
  | 'max_tokens'
  | 'stop_sequence'
  | 'refusal'
  | 'pause_turn'
  | 'compaction'
  | 'model_context_window_exceeded'
  | (string & {});

/** The result block types of Anthropic server tools (`web_search_tool_result`, …): one list, the service's. */
export { SERVER_TOOL_RESULT_TYPES };
export type ServerToolResultType = (typeof SERVER_TOOL_RESULT_TYPES)[number];
/** A server tool's result block as the SDK types it. */
export type ServerToolResultBlock = Extract<BetaContentBlockParam, { type: ServerToolResultType }>;
/** The same, with `tool_use_id` optional (each member of the union on its own). */
type ScriptedResult<T> = T extends unknown
  ? Omit<T, 'tool_use_id'> & { tool_use_id?: string | undefined }
  : never;
export type ServerToolName = BetaServerToolUseBlockParam['name'];

export type FakeBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id?: string | undefined; name: string; input: unknown }
  | { type: 'thinking'; thinking: string }
  /**
   * A summary of the conversation (`null`: the compaction produced none); the fake signs it. `tool_changes`: those of
   * the range it summarizes (compaction-block.ts `toolChangesOf`), absent when not computed.
   */
  | { type: 'compaction'; content: string | null; tool_changes?: ToolChangeBlock[] }
  /** A call of a tool the API runs itself (web search, …); the fake makes up a `srvtoolu_…` id unless given. */
  | { type: 'server_tool_use'; id?: string | undefined; name: ServerToolName; input: unknown }
  /** Its result; `tool_use_id` defaults to the id of the last `server_tool_use` before it in the reply. */
  | ScriptedResult<ServerToolResultBlock>;

export interface FakeMessageReply {
  type: 'message';
  content: FakeBlock[];
  /** Default: `tool_use` when the content has a tool call, `compaction` when it is only a compaction block, else `end_turn`. */
  stop_reason?: FakeStopReason | undefined;
  usage?: Partial<FakeUsage> | undefined;
  /** Default: echoes `body.model`. */
  model?: string | undefined;
  /** The code-execution container the reply ran in; default: the request's `container`, if it names one. */
  container?: { id: string } | undefined;
  /** Wait this long before sending the response headers. */
  delayMs?: number | undefined;
  /**
   * The fake's: send the response only once this settles (before `delayMs`), for a test that acts on the service
   * while the request is in flight — a scripted reply's gate, as a handler's own `await` is for the handler's.
   */
  gate?: Promise<unknown> | undefined;
  /** Delay before each SSE event; overrides the server's pacing. */
  eventDelayMs?: number | undefined;
  /**
   * Stream: destroy the socket after this many SSE events, before `message_stop` (clamped to the event before it).
   * The SDK does not retry a stream that has started. `0`, and any value on a non-stream request, destroys the socket
   * before the response headers: a connection error, which the SDK retries.
   */
  cutAfterEvents?: number | undefined;
  /**
   * Stream: after this many SSE events send `event: error` (`overloaded_error` unless `streamErrorType`) and end.
   * Non-stream: answer `529 overloaded_error` (or the given type) instead.
   */
  streamErrorAfterEvents?: number | undefined;
  /**
   * Stream: after this many SSE events (at least 1, at most the events before `message_stop`) send nothing more and
   * keep the response open until the client goes away or the fake closes: a reply stalled mid-stream, for a test
   * that acts on the service at that point (kill it, interrupt, cancel). Non-stream: never answer, as `hang`.
   */
  hangAfterEvents?: number | undefined;
  /**
   * A paced stream (test fake only): after this many SSE events (at least 1, at most the events before
   * `message_stop`) send nothing more until the test calls the fake's `resume()`, then the rest at the pace: a turn
   * held mid-stream at a known event while a test acts there, then completed.
   */
  pauseAfterEvents?: number | undefined;
  streamErrorType?: string | undefined;
  streamErrorMessage?: string | undefined;
}

export interface FakeErrorReply {
  type: 'error';
  status: number;
  errorType: string;
  message?: string | undefined;
  /** Seconds, sent as `retry-after`. */
  retryAfter?: number | undefined;
  /** Milliseconds, sent as `retry-after-ms`. */
  retryAfterMs?: number | undefined;
  details?: Record<string, unknown> | undefined;
  /** Sent as `x-should-retry: true|false`. */
  shouldRetry?: boolean | undefined;
}

/** Accept the request and never answer; ends when the client disconnects or the fake closes. */
export interface FakeHangReply {
  type: 'hang';
}

export type FakeReply = FakeMessageReply | FakeErrorReply | FakeHangReply;

/** `index` is the position of the request in `requests` (its 0-based arrival order). */
export type FakeHandler = (req: FakeRequest, index: number) => FakeReply | Promise<FakeReply>;

/** A `POST /v1/messages` body: the SDK's params (with `thread`). */
export type WireRequest = MessageCreateParams;

/** An error the fake answers with, in the API's envelope (`{type:"error",error:{type,message,details}}`). */
export interface ApiErrorSpec {
  status: number;
  type: string;
  message: string;
  details?: Record<string, unknown>;
}

/** A content block of a message the fake sends (ids and signatures filled in). */
export type WireBlock =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown }
  | {
      type: 'compaction';
      content: string | null;
      encrypted_content: null;
      signature: string | null;
      tool_changes?: ToolChangeBlock[];
    }
  | { type: 'server_tool_use'; id: string; name: ServerToolName; input: unknown }
  | ServerToolResultBlock;

/** The message the fake sends: the JSON body of a non-stream reply, streamed as SSE events otherwise. */
export interface WireMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: WireBlock[];
  stop_reason: string;
  stop_sequence: null;
  usage: FakeUsage;
  container: { id: string; expires_at: string; skills: null } | null;
}
