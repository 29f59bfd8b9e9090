/**
 * A fake Anthropic Messages API on loopback, faithful to the wire format the SDK reads: JSON and SSE replies, error
 * envelopes with the retry headers, message threads (`message-threads-2026-08-12`) and request validation.
 *
 * Replies come from a FIFO script (`enqueue`), then from a handler (default: the offline model). Every request is
 * recorded with the conversation the model saw, so tests can assert on it.
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import type { AddressInfo, Socket } from 'node:net';
import { offlineHandler } from './offline.js';
import { parseScript } from './script.js';

export * from './script.js';
export { offlineHandler, offlineReply } from './offline.js';

/** One recorded `POST /v1/messages`. */
export interface FakeRequest {
  /** The raw JSON body as received. */
  body: any;
  headers: Record<string, string | string[] | undefined>;
  /**
   * The full conversation the model saw: for a thread `continue` the stored conversation plus the new messages,
   * otherwise `body.messages`.
   */
  messages: any[];
  /** Effective `system` (taken from the thread for a `continue`). */
  system: unknown;
  /** Effective `tools` (taken from the thread for a `continue`), `[]` when none. */
  tools: unknown[];
  stream: boolean;
  /** `Date.now()` when the request was received. */
  at: number;
  /**
   * HTTP status the fake answered with: `undefined` while pending (or for a `hang`), 200 for a stream (even one cut
   * later), 0 when the socket was destroyed before any response.
   */
  status?: number | undefined;
  /** The `id` of the message the fake replied with, if it replied with one. */
  replyId?: string | undefined;
}

export interface FakeUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

export type FakeStopReason =
  'end_turn' | 'tool_use' | 'max_tokens' | 'stop_sequence' | 'refusal' | 'pause_turn';

export type FakeBlock =
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id?: string | undefined; name: string; input: unknown }
  | { type: 'thinking'; thinking: string };

export interface FakeMessageReply {
  type: 'message';
  content: FakeBlock[];
  /** Default: `tool_use` when the content has a tool call, else `end_turn`. */
  stop_reason?: FakeStopReason | undefined;
  usage?: Partial<FakeUsage> | undefined;
  /** Default: echoes `body.model`. */
  model?: string | undefined;
  /** Wait this long before sending the response headers. */
  delayMs?: number | undefined;
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

export interface FakeAnthropic {
  /** e.g. `http://127.0.0.1:PORT`; give it to the SDK as `baseURL`. */
  url: string;
  /** Every request received, in order. */
  requests: FakeRequest[];
  /** FIFO script, used before the handler. A request the fake rejects (validation, threads) consumes nothing. */
  enqueue(...replies: FakeReply[]): void;
  /** The handler used when the queue is empty; `null` restores the default (the start option, else offline). */
  setHandler(fn: FakeHandler | null): void;
  /** Default delay before each SSE event. */
  setPacing(eventDelayMs: number): void;
  /** Resolves once `requests.length >= n` (default timeout 5000 ms). */
  waitForRequests(n: number, timeoutMs?: number): Promise<FakeRequest[]>;
  /** Clear queue, requests, handler, threads, and restore the start pacing. */
  reset(): void;
  /** Forget every stored thread, as a server that lost them: a later `continue` gets `thread_not_found`. */
  forgetThreads(): void;
  /** How many replies are still queued. */
  readonly queued: number;
  /** Closes the server and destroys open sockets. */
  close(): Promise<void>;
}

export interface FakeAnthropicOptions {
  port?: number | undefined;
  /** Default `127.0.0.1`. */
  host?: string | undefined;
  eventDelayMs?: number | undefined;
  handler?: FakeHandler | undefined;
  /** When set, require `Authorization: Bearer <key>` or `x-api-key: <key>`. */
  apiKey?: string | undefined;
  /** Record requests in `requests` (default true); turn off for long benchmarks. */
  record?: boolean | undefined;
  /**
   * Reject consecutive messages of the same role (default false). The real API combines consecutive user or
   * assistant messages into one turn, and the SDK sends them (tool results followed by a message the caller pushed,
   * or two assistant messages around a `pause_turn`), so the default accepts them.
   */
  strictAlternation?: boolean | undefined;
  /** Whether the fake supports message threads (default true); when false a `thread` gets `thread_unsupported_request`. */
  threads?: boolean | undefined;
  /**
   * Most stored thread entries kept (default 100000); the oldest is forgotten beyond it, so a long-running fake stays
   * bounded (a `continue` of a forgotten one gets `thread_not_found` and the SDK replays the history).
   */
  maxThreads?: number | undefined;
  /** Serve the `/_fake/*` control routes (default true). */
  control?: boolean | undefined;
}

export const MESSAGE_THREADS_BETA = 'message-threads-2026-08-12';

interface StoredThread {
  messages: any[];
  system: unknown;
  tools: unknown[];
  stopReason: string;
  /** Approximate JSON size of the conversation, for the token estimate. */
  chars: number;
  continued: boolean;
  inFlight: boolean;
}

interface ApiErrorSpec {
  status: number;
  type: string;
  message: string;
  details?: Record<string, unknown>;
}

interface BuiltMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: any[];
  stop_reason: string;
  stop_sequence: null;
  usage: FakeUsage;
}

class RequestError extends Error {
  constructor(readonly spec: ApiErrorSpec) {
    super(spec.message);
  }
}

const DEFAULT_ERROR_MESSAGES: Record<string, string> = {
  invalid_request_error: 'Invalid request',
  authentication_error: 'invalid x-api-key',
  permission_error: 'Your API key does not have permission to use the specified resource.',
  not_found_error: 'Not found',
  request_too_large: 'Request exceeds the maximum allowed number of bytes.',
  rate_limit_error: 'Number of request tokens has exceeded your per-minute rate limit',
  api_error: 'Internal server error',
  overloaded_error: 'Overloaded',
};

const ERROR_STATUS: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
};

function shortId(): string {
  return randomUUID().replace(/-/g, '').slice(0, 24);
}

function errorBody(type: string, message: string, details?: Record<string, unknown>): string {
  const error: Record<string, unknown> = { type, message };
  if (details) error['details'] = details;
  return JSON.stringify({ type: 'error', error });
}

export async function startFakeAnthropic(opts: FakeAnthropicOptions = {}): Promise<FakeAnthropic> {
  const host = opts.host ?? '127.0.0.1';
  const defaultHandler: FakeHandler = opts.handler ?? offlineHandler;
  const startPacing = opts.eventDelayMs ?? 0;
  const record = opts.record ?? true;
  const strict = opts.strictAlternation ?? false;
  const threadsSupported = opts.threads ?? true;
  const control = opts.control ?? true;
  const maxThreads = opts.maxThreads ?? 100_000;

  let handler: FakeHandler = defaultHandler;
  let pacing = startPacing;
  let queue: FakeReply[] = [];
  let threads = new Map<string, StoredThread>();
  let received = 0;
  let closed = false;
  const requests: FakeRequest[] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const waiters = new Set<{ n: number; resolve: () => void }>();

  const later = (fn: () => void, ms: number): void => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      fn();
    }, ms);
    timers.add(timer);
  };

  const sendJson = (
    res: http.ServerResponse,
    status: number,
    body: string,
    headers: http.OutgoingHttpHeaders = {},
  ) => {
    if (res.headersSent || res.destroyed) return;
    res.writeHead(status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'request-id': `req_fake_${shortId()}`,
      ...headers,
    });
    res.end(body);
  };

  const sendApiError = (res: http.ServerResponse, spec: ApiErrorSpec) =>
    sendJson(res, spec.status, errorBody(spec.type, spec.message, spec.details));

  const noteRequest = (fr: FakeRequest): number => {
    const index = received++;
    if (record) requests.push(fr);
    for (const waiter of waiters) {
      if (received >= waiter.n) {
        waiters.delete(waiter);
        waiter.resolve();
      }
    }
    return index;
  };

  // ---- /v1/messages -------------------------------------------------------------------------------------------

  const handleMessages = async (req: http.IncomingMessage, res: http.ServerResponse, raw: string) => {
    let body: any;
    try {
      body = JSON.parse(raw);
    } catch {
      return sendApiError(res, {
        status: 400,
        type: 'invalid_request_error',
        message: 'There was an issue with the request body: the body is not valid JSON',
      });
    }
    const isObject = typeof body === 'object' && body !== null && !Array.isArray(body);
    const thread =
      isObject && typeof body.thread === 'object' && body.thread !== null ? body.thread : undefined;
    const newMessages: any[] = isObject && Array.isArray(body.messages) ? body.messages : [];
    const parent: StoredThread | undefined =
      thread?.type === 'continue' && typeof thread.previous_message_id === 'string'
        ? threads.get(thread.previous_message_id)
        : undefined;
    const fr: FakeRequest = {
      body,
      headers: req.headers,
      messages: parent ? [...parent.messages, ...newMessages] : newMessages,
      system: parent ? parent.system : isObject ? body.system : undefined,
      tools: parent ? parent.tools : isObject && Array.isArray(body.tools) ? body.tools : [],
      stream: isObject && body.stream === true,
      at: Date.now(),
    };
    const index = noteRequest(fr);
    const answer = (spec: ApiErrorSpec) => {
      fr.status = spec.status;
      sendApiError(res, spec);
    };

    if (opts.apiKey !== undefined) {
      const auth = req.headers['authorization'];
      const key = req.headers['x-api-key'];
      if (auth !== `Bearer ${opts.apiKey}` && key !== opts.apiKey) {
        return answer({ status: 401, type: 'authentication_error', message: 'invalid x-api-key' });
      }
    }

    try {
      validateBody(body, req.headers);
      if (thread) checkThread(thread, parent, newMessages);
      validateConversation(fr.messages, strict);
    } catch (error) {
      if (error instanceof RequestError) return answer(error.spec);
      throw error;
    }

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

    let reply: FakeReply;
    const next = queue.shift();
    if (next) {
      reply = next;
    } else {
      try {
        reply = await handler(fr, index);
      } catch (error) {
        end(false);
        return answer({
          status: 500,
          type: 'api_error',
          message: `fake handler failed: ${error instanceof Error ? error.message : String(error)}`,
        });
      }
    }
    if (res.destroyed || closed) return end(false);

    if (reply.type === 'hang') return; // `close` ends it
    if (reply.type === 'error') {
      end(false);
      fr.status = reply.status;
      const headers: http.OutgoingHttpHeaders = {};
      if (reply.retryAfter !== undefined) headers['retry-after'] = String(reply.retryAfter);
      if (reply.retryAfterMs !== undefined) headers['retry-after-ms'] = String(reply.retryAfterMs);
      if (reply.shouldRetry !== undefined) headers['x-should-retry'] = String(reply.shouldRetry);
      const message = reply.message ?? DEFAULT_ERROR_MESSAGES[reply.errorType] ?? reply.errorType;
      return sendJson(res, reply.status, errorBody(reply.errorType, message, reply.details), headers);
    }

    const inputChars = (parent?.chars ?? 0) + raw.length;
    const message = buildMessage(reply, body, inputChars);
    const store = () => {
      fr.replyId = message.id;
      if (thread) {
        threads.set(message.id, {
          messages: [...fr.messages, { role: 'assistant', content: message.content }],
          system: fr.system,
          tools: fr.tools,
          stopReason: message.stop_reason,
          chars: inputChars + JSON.stringify(message.content).length,
          continued: false,
          inFlight: false,
        });
        if (threads.size > maxThreads) threads.delete(threads.keys().next().value!);
      }
      end(true);
    };

    const respond = () => {
      if (res.destroyed || closed) return end(false);
      if (!fr.stream) {
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
      streamMessage(res, fr, message, reply, store, () => end(false));
    };
    if (reply.delayMs !== undefined && reply.delayMs > 0) later(respond, reply.delayMs);
    else respond();
  };

  const checkThread = (thread: any, parent: StoredThread | undefined, newMessages: any[]) => {
    if (!threadsSupported) {
      throw new RequestError({
        status: 400,
        type: 'invalid_request_error',
        message: 'thread: message threads are not supported for this request',
        details: { error_code: 'thread_unsupported_request', unsupported: ['thread'] },
      });
    }
    if (thread.type === 'create') return;
    if (parent === undefined) {
      throw new RequestError({
        status: 404,
        type: 'not_found_error',
        message: `thread.previous_message_id: no stored message thread ends with ${thread.previous_message_id}`,
        details: { error_code: 'thread_not_found' },
      });
    }
    if (parent.continued) {
      throw new RequestError({
        status: 400,
        type: 'invalid_request_error',
        message: `thread.previous_message_id: ${thread.previous_message_id} has already been continued; continue from the latest message of the thread`,
        details: { error_code: 'thread_already_continued' },
      });
    }
    if (parent.inFlight) {
      throw new RequestError({
        status: 400,
        type: 'invalid_request_error',
        message: `thread.previous_message_id: another request is already continuing ${thread.previous_message_id}`,
        details: { error_code: 'thread_continue_in_flight' },
      });
    }
    if (
      newMessages.length === 0 &&
      parent.stopReason !== 'pause_turn' &&
      parent.stopReason !== 'compaction'
    ) {
      throw new RequestError({
        status: 400,
        type: 'invalid_request_error',
        message: 'messages: at least one message is required',
      });
    }
  };

  // ---- SSE ----------------------------------------------------------------------------------------------------

  const streamMessage = (
    res: http.ServerResponse,
    fr: FakeRequest,
    message: BuiltMessage,
    reply: FakeMessageReply,
    store: () => void,
    fail: () => void,
  ) => {
    const events = sseEvents(message);
    const beforeStop = events.length - 1;
    let count = events.length;
    let tail: 'end' | 'cut' | 'error' = 'end';
    if (reply.cutAfterEvents !== undefined) {
      tail = 'cut';
      count = clamp(reply.cutAfterEvents, 0, beforeStop);
    } else if (reply.streamErrorAfterEvents !== undefined) {
      tail = 'error';
      count = clamp(reply.streamErrorAfterEvents, 0, beforeStop);
    }
    const errorEvent = () => {
      const type = reply.streamErrorType ?? 'overloaded_error';
      const text = reply.streamErrorMessage ?? DEFAULT_ERROR_MESSAGES[type] ?? type;
      return `event: error\ndata: ${errorBody(type, text)}\n\n`;
    };
    const finish = (chunk: string) => {
      if (tail === 'end') {
        // Stored before `message_stop` leaves, so a client that continues at once finds the thread.
        store();
        res.end(chunk);
      } else if (tail === 'error') {
        fail();
        res.end(chunk + errorEvent());
      } else {
        fail();
        if (chunk) res.write(chunk, () => res.socket?.destroy());
        else res.socket?.destroy();
      }
    };

    if (tail === 'cut' && count === 0) {
      // Before the headers: the SDK sees a connection error and retries it.
      fr.status = 0;
      fail();
      res.socket?.destroy();
      return;
    }
    fr.status = 200;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache',
      'request-id': `req_fake_${shortId()}`,
    });
    const delay = reply.eventDelayMs ?? pacing;
    // Headers leave at once, as from the real API; the events follow at the pace.
    if (delay > 0) res.flushHeaders();
    if (!(delay > 0)) {
      finish(events.slice(0, count).join(''));
      return;
    }
    // Each event waits `delay` after the previous one's due time, so K events take at least K * delay.
    let i = 0;
    let due = performance.now() + delay;
    const step = () => {
      if (res.destroyed || closed) return fail();
      const wait = due - performance.now();
      if (wait > 0) return later(step, Math.ceil(wait));
      if (i >= count) return finish('');
      if (i === count - 1) {
        i++;
        return finish(events[i - 1]!);
      }
      res.write(events[i++]!);
      due += delay;
      later(step, delay);
    };
    // With no event to write first, only an `event: error` is left (a cut at 0 returned above).
    if (count === 0) later(() => (res.destroyed || closed ? fail() : finish('')), delay);
    else later(step, delay);
  };

  // ---- control routes -----------------------------------------------------------------------------------------

  const handleControl = (path: string, url: URL, res: http.ServerResponse, raw: string, method: string) => {
    const parse = (): any => (raw ? JSON.parse(raw) : undefined);
    try {
      if (method === 'POST' && path === '/_fake/enqueue') {
        const input = parse();
        const replies: FakeReply[] = Array.isArray(input) ? input : [input];
        for (const reply of replies) {
          const ok =
            (reply?.type === 'message' && Array.isArray(reply.content)) ||
            (reply?.type === 'error' &&
              Number.isInteger(reply.status) &&
              typeof reply.errorType === 'string') ||
            reply?.type === 'hang';
          if (!ok) {
            throw new Error(
              'each reply needs {type:"message",content:[...]}, {type:"error",status,errorType} or {type:"hang"}',
            );
          }
        }
        queue.push(...replies);
        return sendJson(res, 200, JSON.stringify({ queued: queue.length }));
      }
      if (method === 'GET' && path === '/_fake/requests') {
        const since = Number(url.searchParams.get('since') ?? 0) || 0;
        return sendJson(res, 200, JSON.stringify(requests.slice(since)));
      }
      if (method === 'POST' && path === '/_fake/reset') {
        fake.reset();
        return sendJson(res, 200, '{"ok":true}');
      }
      if (method === 'POST' && path === '/_fake/pacing') {
        const value = Number(parse()?.eventDelayMs);
        if (!Number.isFinite(value) || value < 0) throw new Error('eventDelayMs must be a number >= 0');
        pacing = value;
        return sendJson(res, 200, JSON.stringify({ eventDelayMs: pacing }));
      }
      if (method === 'POST' && path === '/_fake/forget-threads') {
        fake.forgetThreads();
        return sendJson(res, 200, '{"ok":true}');
      }
      if (method === 'POST' && path === '/_fake/script') {
        const script = parse()?.script;
        handler = script == null ? defaultHandler : parseScript(String(script));
        return sendJson(res, 200, '{"ok":true}');
      }
      if (method === 'GET' && path === '/_fake/stats') {
        return sendJson(
          res,
          200,
          JSON.stringify({
            requests: received,
            queued: queue.length,
            threads: threads.size,
            eventDelayMs: pacing,
          }),
        );
      }
    } catch (error) {
      return sendApiError(res, {
        status: 400,
        type: 'invalid_request_error',
        message: error instanceof Error ? error.message : String(error),
      });
    }
    return notFound(res, method, path);
  };

  const notFound = (res: http.ServerResponse, method: string, path: string) =>
    sendApiError(res, { status: 404, type: 'not_found_error', message: `Not found: ${method} ${path}` });

  // ---- server -------------------------------------------------------------------------------------------------

  const server = http.createServer((req, res) => {
    const method = req.method ?? 'GET';
    const url = new URL(req.url ?? '/', 'http://fake');
    const path = url.pathname;
    const isMessages = path === '/v1/messages' && method === 'POST';
    const isControl = control && path.startsWith('/_fake/');
    if (!isMessages && !isControl) {
      req.resume();
      return notFound(res, method, path);
    }
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      if (isControl) return handleControl(path, url, res, raw, method);
      handleMessages(req, res, raw).catch((error: unknown) => {
        sendApiError(res, {
          status: 500,
          type: 'api_error',
          message: `fake server error: ${error instanceof Error ? error.message : String(error)}`,
        });
      });
    });
  });
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.requestTimeout = 0;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  const fake: FakeAnthropic = {
    url: `http://${urlHost}:${address.port}`,
    requests,
    enqueue(...replies) {
      queue.push(...replies);
    },
    setHandler(fn) {
      handler = fn ?? defaultHandler;
    },
    setPacing(eventDelayMs) {
      pacing = eventDelayMs;
    },
    waitForRequests(n, timeoutMs = 5000) {
      if (received >= n) return Promise.resolve(requests);
      return new Promise((resolve, reject) => {
        const waiter = {
          n,
          resolve: () => {
            clearTimeout(timer);
            resolve(requests);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(waiter);
          reject(new Error(`fake Anthropic: ${received} of ${n} requests after ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(waiter);
      });
    },
    reset() {
      queue = [];
      requests.length = 0;
      received = 0;
      handler = defaultHandler;
      pacing = startPacing;
      threads = new Map();
    },
    forgetThreads() {
      threads = new Map();
    },
    get queued() {
      return queue.length;
    },
    close() {
      closed = true;
      for (const timer of timers) clearTimeout(timer);
      timers.clear();
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return fake;
}

function clamp(value: number, min: number, max: number): number {
  return Math.max(min, Math.min(max, Math.floor(value)));
}

// ---- validation -----------------------------------------------------------------------------------------------

function invalid(message: string): RequestError {
  return new RequestError({ status: 400, type: 'invalid_request_error', message });
}

function validateBody(body: any, headers: http.IncomingHttpHeaders): void {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw invalid('The request body must be a JSON object');
  }
  if (body.model === undefined) throw invalid('model: Field required');
  if (typeof body.model !== 'string' || !body.model) throw invalid('model: Input should be a valid string');
  if (body.max_tokens === undefined) throw invalid('max_tokens: Field required');
  if (!Number.isInteger(body.max_tokens)) throw invalid('max_tokens: Input should be a valid integer');
  if (body.max_tokens < 1) throw invalid('max_tokens: Input should be greater than or equal to 1');
  if (body.messages === undefined) throw invalid('messages: Field required');
  if (!Array.isArray(body.messages)) throw invalid('messages: Input should be a valid list');
  if (body.stream !== undefined && typeof body.stream !== 'boolean') {
    throw invalid('stream: Input should be a valid boolean');
  }
  if (body.tools !== undefined) {
    if (!Array.isArray(body.tools)) throw invalid('tools: Input should be a valid list');
    const names = new Set<string>();
    body.tools.forEach((tool: any, i: number) => {
      const name = tool?.name;
      if (typeof name !== 'string') return; // server tools of some types have no name
      if (names.has(name)) throw invalid(`tools.${i}: Tool names must be unique: ${name}`);
      names.add(name);
    });
  }
  const thread = body.thread;
  if (thread === undefined || thread === null) {
    if (body.messages.length === 0) throw invalid('messages: at least one message is required');
    return;
  }
  if (typeof thread !== 'object' || (thread.type !== 'create' && thread.type !== 'continue')) {
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
  for (const field of ['system', 'tools']) {
    if (body[field] !== undefined) {
      throw invalid(
        `${field}: cannot be set on a thread \`continue\`; the thread keeps the \`${field}\` it was created with`,
      );
    }
  }
}

/**
 * Checks a conversation as the real API does. Consecutive messages of one role form a single turn (the API combines
 * them) unless `strict`; `system`-role messages (`tool_addition` / `tool_removal`) are skipped.
 */
export function validateConversation(messages: any[], strict = false): void {
  interface Turn {
    role: 'user' | 'assistant';
    first: number;
    toolUses: Map<string, number>;
    results: Array<{ id: unknown; message: number; block: number }>;
  }
  const turns: Turn[] = [];
  const seenToolUse = new Set<string>();
  let lastNonSystem = -1;
  messages.forEach((message, i) => {
    if (message?.role !== 'system') lastNonSystem = i;
  });

  messages.forEach((message: any, i: number) => {
    if (typeof message !== 'object' || message === null)
      throw invalid(`messages.${i}: Input should be an object`);
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
    let turn = turns.at(-1);
    if (!turn) {
      if (role !== 'user') throw invalid(`messages.${i}: first message must use the "user" role`);
    } else if (turn.role === role && strict) {
      throw invalid(
        `messages.${i}: roles must alternate between "user" and "assistant", but found multiple "${role}" roles in a row`,
      );
    }
    if (!turn || turn.role !== role) {
      turn = { role, first: i, toolUses: new Map(), results: [] };
      turns.push(turn);
    }
    if (typeof content === 'string') return;
    content.forEach((block: any, j: number) => {
      if (typeof block !== 'object' || block === null || typeof block.type !== 'string') {
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
        if (typeof block.input !== 'object' || block.input === null || Array.isArray(block.input)) {
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
    if (turn.role !== 'user') return;
    const previous = t > 0 ? turns[t - 1] : undefined;
    const answered = new Set<unknown>();
    for (const result of turn.results) {
      if (!previous || !previous.toolUses.has(result.id as string)) {
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

// ---- replies --------------------------------------------------------------------------------------------------

function buildMessage(reply: FakeMessageReply, body: any, inputChars: number): BuiltMessage {
  let outputChars = 0;
  const content = reply.content.map((block) => {
    if (block.type === 'text') {
      outputChars += block.text.length;
      return { type: 'text', text: block.text };
    }
    if (block.type === 'thinking') {
      outputChars += block.thinking.length;
      return { type: 'thinking', thinking: block.thinking, signature: `fakesig_${shortId()}` };
    }
    const input = block.input === undefined ? {} : block.input;
    outputChars += JSON.stringify(input).length + block.name.length;
    return { type: 'tool_use', id: block.id ?? `toolu_${shortId()}`, name: block.name, input };
  });
  const hasToolUse = content.some((block) => block.type === 'tool_use');
  return {
    id: `msg_fake_${shortId()}`,
    type: 'message',
    role: 'assistant',
    model: reply.model ?? body.model,
    content,
    stop_reason: reply.stop_reason ?? (hasToolUse ? 'tool_use' : 'end_turn'),
    stop_sequence: null,
    usage: {
      input_tokens: Math.max(1, Math.ceil(inputChars / 4)),
      output_tokens: Math.max(1, Math.ceil(outputChars / 4)),
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      ...reply.usage,
    },
  };
}

function sse(type: string, data: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The SSE events of `message`, each a complete `event: …\ndata: …\n\n` string, ending with `message_stop`. */
function sseEvents(message: BuiltMessage): string[] {
  const events: string[] = [];
  events.push(
    sse('message_start', {
      type: 'message_start',
      message: {
        ...message,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...message.usage, output_tokens: 1 },
      },
    }),
  );
  events.push(sse('ping', { type: 'ping' }));
  message.content.forEach((block, index) => {
    const delta = (d: unknown) =>
      events.push(sse('content_block_delta', { type: 'content_block_delta', index, delta: d }));
    if (block.type === 'text') {
      events.push(
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: { type: 'text', text: '' },
        }),
      );
      for (const chunk of textChunks(block.text)) delta({ type: 'text_delta', text: chunk });
    } else if (block.type === 'thinking') {
      events.push(
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: { type: 'thinking', thinking: '', signature: '' },
        }),
      );
      for (const chunk of textChunks(block.thinking)) delta({ type: 'thinking_delta', thinking: chunk });
      delta({ type: 'signature_delta', signature: block.signature });
    } else {
      events.push(
        sse('content_block_start', {
          type: 'content_block_start',
          index,
          content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
        }),
      );
      for (const chunk of jsonChunks(JSON.stringify(block.input)))
        delta({ type: 'input_json_delta', partial_json: chunk });
    }
    events.push(sse('content_block_stop', { type: 'content_block_stop', index }));
  });
  events.push(
    sse('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: message.stop_reason, stop_sequence: null },
      usage: {
        input_tokens: message.usage.input_tokens,
        cache_creation_input_tokens: message.usage.cache_creation_input_tokens,
        cache_read_input_tokens: message.usage.cache_read_input_tokens,
        output_tokens: message.usage.output_tokens,
      },
    }),
  );
  events.push(sse('message_stop', { type: 'message_stop' }));
  return events;
}

/** Text split into chunks of three words (with their trailing whitespace). */
export function textChunks(text: string, wordsPerChunk = 3): string[] {
  if (!text) return [];
  const words = text.match(/\s*\S+\s*/g) ?? [text];
  const chunks: string[] = [];
  for (let i = 0; i < words.length; i += wordsPerChunk)
    chunks.push(words.slice(i, i + wordsPerChunk).join(''));
  return chunks;
}

/** JSON split into at least two chunks (of at most ~24 characters) when it has two characters or more. */
export function jsonChunks(json: string): string[] {
  if (json.length < 2) return [json];
  const count = Math.max(2, Math.ceil(json.length / 24));
  const size = Math.ceil(json.length / count);
  const chunks: string[] = [];
  for (let i = 0; i < json.length; i += size) chunks.push(json.slice(i, i + size));
  return chunks;
}
