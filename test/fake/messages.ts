/**
 * A model request (`POST /v1/messages`, or its Vertex or Bedrock form turned into it: provider-wires.ts): parse and record the request, check the key, the body, the thread and the conversation, pick
 * the reply (the script queue, else the handler), then answer it as JSON, as an SSE stream, as an error, or not at all.
 */
import type http from 'node:http';
import { conversationStart } from '../../src/offline/compaction.js';
import { chooseReply } from '../../src/offline/reply-choice.js';
import { validateCompactionFields } from './compaction-check.js';
import { buildMessage } from '../../src/offline/reply.js';
import { DEFAULT_ERROR_MESSAGES, ERROR_STATUS, errorBody, sendApiError, sendJson } from './respond.js';
import { streamMessage } from './sse.js';
import type { FakeState } from './state.js';
import { validateCacheMarks } from './cache-marks.js';
import { checkThread } from './threads.js';
import { mcpServerNamesOf, validateToolChanges } from './tool-changes.js';
import { validateContentBlocks, validateSystem, validateToolChoice } from './content-check.js';
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { RequestError, unchecked, validateBody, validateConversation } from './validate.js';
import type { Inbound } from './provider-wires.js';
import type { ApiErrorSpec, FakeReply, FakeRequest, WireRequest } from '../../src/offline/wire.js';

export async function handleMessages(
  state: FakeState,
  call: Inbound,
  res: http.ServerResponse,
): Promise<void> {
  const { settings } = state;
  const { raw, headers } = call;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return sendApiError(res, {
      status: 400,
      type: 'invalid_request_error',
      message: 'There was an issue with the request body: the body is not valid JSON',
    });
  }
  const fields = unchecked<
    'thread' | 'messages' | 'system' | 'tools' | 'stream' | 'tool_choice' | 'mcp_servers' | 'cache_control'
  >(parsed);
  const thread = unchecked<'type' | 'previous_message_id'>(fields?.thread);
  const newMessages: unknown[] = Array.isArray(fields?.messages) ? fields.messages : [];
  const parent =
    thread?.type === 'continue' && typeof thread.previous_message_id === 'string'
      ? state.threads.get(thread.previous_message_id)
      : undefined;
  const conversation: unknown[] = parent ? [...parent.messages, ...newMessages] : newMessages;

  // Checked before the request is recorded, answered after (an authentication error first).
  let rejection: ApiErrorSpec | undefined;
  try {
    validateBody(parsed, headers);
    validateCompactionFields(parsed, headers);
    if (thread) checkThread(thread, parent, newMessages, settings.threadsSupported);
    validateConversation(conversation, settings.strictAlternation);
    validateContentBlocks(conversation);
    validateSystem(fields?.system);
    validateCacheMarks(
      conversation,
      parent ? parent.system : fields?.system,
      parent ? parent.tools : fields?.tools,
      fields?.cache_control,
    );
    const tools = validateToolChanges(
      conversation,
      parent ? parent.tools : Array.isArray(fields?.tools) ? fields.tools : [],
      headers,
      mcpServerNamesOf(fields?.mcp_servers),
    );
    validateToolChoice(fields?.tool_choice, tools.available, tools.opaque);
  } catch (error) {
    if (!(error instanceof RequestError)) throw error;
    rejection = error.spec;
  }
  const fr: FakeRequest = {
    // Typed as the API defines them, which only an accepted request is known to match (see `FakeRequest.body`).
    body: parsed as WireRequest,
    messages: conversation as BetaMessageParam[],
    system: parent ? parent.system : fields?.system,
    tools: parent ? parent.tools : Array.isArray(fields?.tools) ? fields.tools : [],
    headers,
    stream: fields?.stream === true,
    bytes: call.bytes,
    at: Date.now(),
    wire: call.wire,
    path: call.path,
  };
  const index = state.noteRequest(fr);
  const answer = (spec: ApiErrorSpec) => {
    fr.status = spec.status;
    sendApiError(res, spec);
  };

  // The cloud wires carry their own credentials (checked in provider-wires.ts), never the API key.
  if (call.rejection?.status === 401 || call.rejection?.status === 403) return answer(call.rejection);
  if (settings.apiKey !== undefined && call.wire === 'anthropic') {
    const auth = headers['authorization'];
    const key = headers['x-api-key'];
    if (auth !== `Bearer ${settings.apiKey}` && key !== settings.apiKey) {
      return answer({ status: 401, type: 'authentication_error', message: 'invalid x-api-key' });
    }
  }
  rejection = call.rejection ?? rejection;
  if (rejection) return answer(rejection);
  // Accepted: `parsed` is a valid body with a `model` string (validateBody).
  const body = fr.body;

  if (parent) parent.inFlight = true;
  let ended = false;
  /** Called once the request is over; `stored` says whether the reply was stored under the thread. */
  const end = (stored: boolean) => {
    if (ended) return;
    ended = true;
    if (parent) {
      parent.inFlight = false;
      if (stored) {
        // Kept only to answer `thread_already_continued`; the conversation lives on under the new reply.
        parent.continued = true;
        parent.messages = [];
      }
    }
  };
  res.on('close', () => end(false));

  // The model reads from the last compaction block on: the input it is billed for starts there.
  const start = conversationStart(fr.messages);
  const dropped = start > 0 ? JSON.stringify(fr.messages.slice(0, start)).length : 0;
  const inputChars = Math.max(1, (parent?.chars ?? 0) + raw.length - dropped);

  let reply: FakeReply;
  // A compaction request takes a scripted reply only if it is a compaction (scripts of turns stay for the turns).
  const head = state.queue[0];
  const scripted =
    head && (!body.compaction || (head.type === 'message' && head.content[0]?.type === 'compaction'));
  try {
    reply = scripted
      ? state.queue.shift()!
      : await chooseReply(fr, inputChars, (r) => state.handler(r, index));
  } catch (error) {
    end(false);
    return answer({
      status: 500,
      type: 'api_error',
      message: `fake handler failed: ${error instanceof Error ? error.message : String(error)}`,
    });
  }
  if (res.destroyed || state.closed) return end(false);

  if (reply.type === 'hang') return; // `close` ends it
  if (reply.type === 'error') {
    end(false);
    fr.status = reply.status;
    const out: http.OutgoingHttpHeaders = {};
    if (reply.retryAfter !== undefined) out['retry-after'] = String(reply.retryAfter);
    if (reply.retryAfterMs !== undefined) out['retry-after-ms'] = String(reply.retryAfterMs);
    if (reply.shouldRetry !== undefined) out['x-should-retry'] = String(reply.shouldRetry);
    const message = reply.message ?? DEFAULT_ERROR_MESSAGES[reply.errorType] ?? reply.errorType;
    return sendJson(res, reply.status, errorBody(reply.errorType, message, reply.details), out);
  }

  const message = buildMessage(reply, body.model, inputChars, body.container);
  const store = () => {
    fr.replyId = message.id;
    if (thread) {
      state.threads.set(message.id, {
        messages: [...fr.messages, { role: 'assistant', content: message.content }],
        system: fr.system,
        tools: fr.tools,
        stopReason: message.stop_reason,
        chars: inputChars + JSON.stringify(message.content).length,
        continued: false,
        inFlight: false,
      });
    }
    end(true);
  };

  const respond = () => {
    if (res.destroyed || state.closed) return end(false);
    if (!fr.stream) {
      if (reply.hangAfterEvents !== undefined) return end(false); // as `hang`: `close` ends it
      if (reply.cutAfterEvents !== undefined) {
        fr.status = 0;
        end(false);
        res.socket?.destroy();
        return;
      }
      if (reply.streamErrorAfterEvents !== undefined) {
        end(false);
        const type = reply.streamErrorType ?? 'overloaded_error';
        const status = ERROR_STATUS[type] ?? 529;
        fr.status = status;
        const text = reply.streamErrorMessage ?? DEFAULT_ERROR_MESSAGES[type] ?? type;
        return sendJson(res, status, errorBody(type, text));
      }
      fr.status = 200;
      store();
      return sendJson(res, 200, JSON.stringify(message));
    }
    streamMessage(state, res, fr, message, reply, call.framing, store, () => end(false));
  };
  const go = () => {
    if (reply.delayMs !== undefined && reply.delayMs > 0) state.later(respond, reply.delayMs);
    else respond();
  };
  if (reply.gate) void reply.gate.then(() => !res.destroyed && !state.closed && go());
  else go();
}
