/**
 * The offline model as the SDK's `fetch`: when no ANTHROPIC_API_KEY is set, the Anthropic client is built with this
 * function, so a turn never leaves the process (no loopback server). It answers `POST …/v1/messages` as the API does
 * for a well-formed request — JSON or SSE, message threads, compaction — with the offline model's reply
 * (model.ts); requests come from the SDK, so only what the SDK may send is handled.
 *
 * Threads live in this process's memory (bounded): a `continue` that names a thread another replica (or a restart)
 * made gets the API's `thread_not_found`, and the SDK sends the whole history again, as it does against the API.
 */
import type { BetaMessageParam } from '@anthropic-ai/sdk/resources/beta/messages/messages';
import { conversationStart } from './compaction.js';
import { errorBody, shortId } from './envelope.js';
import { offlineReply } from './model.js';
import { buildMessage } from './reply.js';
import { chooseReply } from './reply-choice.js';
import { sseEvents } from './sse-events.js';
import { ThreadStore, type StoredThread } from './threads.js';
import { unchecked } from './unchecked.js';
import type { FakeRequest, WireMessage, WireRequest } from './wire.js';

export interface OfflineFetchOptions {
  /** Delay before each SSE event, in ms (OFFLINE_EVENT_DELAY_MS): a demo streams as a model would. */
  eventDelayMs: number;
  /** Most threads kept; the oldest is forgotten beyond it. */
  maxThreads?: number;
}

const JSON_HEADERS = { 'content-type': 'application/json' };

function apiError(
  status: number,
  type: string,
  message: string,
  details?: Record<string, unknown>,
): Response {
  return new Response(errorBody(type, message, details), {
    status,
    headers: { ...JSON_HEADERS, 'request-id': `req_offline_${shortId()}` },
  });
}

async function bodyText(input: RequestInfo | URL, init: RequestInit | undefined): Promise<string> {
  if (typeof init?.body === 'string') return init.body;
  if (init?.body != null) return new Response(init.body).text();
  return input instanceof Request ? input.text() : '';
}

function urlOf(input: RequestInfo | URL): URL {
  return new URL(typeof input === 'string' ? input : input instanceof URL ? input.href : input.url);
}

/** The SSE body of `message`, an event every `delayMs`; it stops when `signal` aborts. */
function sseBody(
  message: WireMessage,
  delayMs: number,
  signal: AbortSignal | null | undefined,
): ReadableStream {
  const events = sseEvents(message);
  const encoder = new TextEncoder();
  if (!(delayMs > 0)) return new Response(events.join('')).body!;
  let i = 0;
  let timer: NodeJS.Timeout | undefined;
  return new ReadableStream<Uint8Array>({
    pull(ctrl) {
      if (signal?.aborted) return ctrl.error(signal.reason);
      const event = events[i++];
      if (event === undefined) return ctrl.close();
      return new Promise<void>((resolve) => {
        timer = setTimeout(() => {
          ctrl.enqueue(encoder.encode(event));
          resolve();
        }, delayMs);
      });
    },
    cancel: () => clearTimeout(timer),
  });
}

/** The conversation a request continues, or the API's refusal when its thread cannot be continued. */
function threadOf(
  threads: ThreadStore,
  thread: { type?: unknown; previous_message_id?: unknown } | undefined,
): StoredThread | Response | undefined {
  if (thread?.type !== 'continue') return undefined;
  const id = typeof thread.previous_message_id === 'string' ? thread.previous_message_id : '';
  const parent = threads.get(id);
  if (!parent) {
    return apiError(404, 'not_found_error', `thread: no thread ends with message ${id}`, {
      error_code: 'thread_not_found',
    });
  }
  if (parent.continued || parent.inFlight) {
    const code = parent.continued ? 'thread_already_continued' : 'thread_continue_in_flight';
    return apiError(400, 'invalid_request_error', `thread: message ${id} was already continued`, {
      error_code: code,
    });
  }
  return parent;
}

export function offlineFetch(opts: OfflineFetchOptions): typeof fetch {
  const threads = new ThreadStore(opts.maxThreads ?? 10_000);
  return async (input, init) => {
    if (!urlOf(input).pathname.endsWith('/v1/messages') || (init?.method ?? 'GET') !== 'POST') {
      return apiError(404, 'not_found_error', 'The offline model answers POST /v1/messages only');
    }
    const raw = await bodyText(input, init);
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch {
      return apiError(
        400,
        'invalid_request_error',
        'There was an issue with the request body: not valid JSON',
      );
    }
    const fields = unchecked<'thread' | 'messages' | 'system' | 'tools' | 'stream' | 'model' | 'container'>(
      parsed,
    );
    const thread = unchecked<'type' | 'previous_message_id'>(fields?.thread);
    const parent = threadOf(threads, thread);
    if (parent instanceof Response) return parent;
    const newMessages: unknown[] = Array.isArray(fields?.messages) ? fields.messages : [];
    const fr: FakeRequest = {
      // The SDK sends bodies the API accepts: typed as the API defines them.
      body: parsed as WireRequest,
      messages: (parent ? [...parent.messages, ...newMessages] : newMessages) as BetaMessageParam[],
      system: parent ? parent.system : fields?.system,
      tools: parent ? parent.tools : Array.isArray(fields?.tools) ? fields.tools : [],
      headers: {},
      stream: fields?.stream === true,
      at: Date.now(),
    };
    // The model reads from the last compaction block on: the input it is billed for starts there.
    const start = conversationStart(fr.messages);
    const dropped = start > 0 ? JSON.stringify(fr.messages.slice(0, start)).length : 0;
    const inputChars = Math.max(1, (parent?.chars ?? 0) + raw.length - dropped);
    const reply = await chooseReply(fr, inputChars, offlineReply);
    if (reply.type !== 'message') return apiError(500, 'api_error', 'The offline model failed');
    const model = typeof fields?.model === 'string' ? fields.model : 'offline';
    const message = buildMessage(reply, model, inputChars, fields?.container);
    if (thread) {
      if (parent) Object.assign(parent, { continued: true, messages: [] });
      threads.set(message.id, {
        messages: [...fr.messages, { role: 'assistant', content: message.content }],
        system: fr.system,
        tools: fr.tools,
        stopReason: message.stop_reason,
        chars: inputChars + JSON.stringify(message.content).length,
        continued: false,
        inFlight: false,
      });
    }
    const headers = { 'request-id': `req_offline_${shortId()}` };
    if (!fr.stream)
      return new Response(JSON.stringify(message), { headers: { ...headers, ...JSON_HEADERS } });
    return new Response(sseBody(message, opts.eventDelayMs, init?.signal), {
      headers: {
        ...headers,
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
      },
    });
  };
}
