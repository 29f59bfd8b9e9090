/**
 * A fake Anthropic Messages API on loopback, faithful to the wire format the SDK reads: JSON and SSE replies, error
 * envelopes with the retry headers, message threads (`message-threads-2026-08-12`) and request validation.
 *
 * Replies come from a FIFO script (`enqueue`), then from a handler (default: the offline model). Every request is
 * recorded with the conversation the model saw, so tests can assert on it.
 *
 * The same handler answers Vertex's (`…:rawPredict`, `…:streamRawPredict`) and Bedrock's (`/model/{id}/invoke`,
 * `…/invoke-with-response-stream`, in the AWS event-stream framing) wires: `provider-wires.ts`.
 *
 * This file starts the HTTP server and routes requests; what happens to them lives in `messages.ts` (the
 * `/v1/messages` handler), `validate.ts`, `threads.ts`, `reply.ts`, `sse.ts`, `control.ts` (`/_fake/*`) and
 * `respond.ts`. The types are in `wire.ts`, the offline model in `offline.ts`, the reply builders in `script.ts`.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import { handleControl, notFound } from './control.js';
import { handleMessages } from './messages.js';
import { offlineHandler } from '../../src/offline/model.js';
import { inbound, matchWire } from './provider-wires.js';
import { errorBody, sendApiError, sendJson } from './respond.js';
import { FakeState } from './state.js';
import type { FakeHandler, FakeReply, FakeRequest } from '../../src/offline/wire.js';

export * from '../../src/offline/wire.js';
export * from './script.js';
export { offlineHandler, offlineReply } from '../../src/offline/model.js';
export { validateConversation } from './validate.js';
export { jsonChunks } from '../../src/offline/sse-events.js';
export { textChunks } from '../../src/offline/scan.js';

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
  /** Sends the rest of every stream held at its `pauseAfterEvents` (the next event after the reply's pace). */
  resume(): void;
  /** Resolves once `requests.length >= n` (default timeout 5000 ms). */
  waitForRequests(n: number, timeoutMs?: number): Promise<FakeRequest[]>;
  /** Clear queue, requests, handler, threads, and restore the start pacing. */
  reset(): void;
  /** Forget every stored thread, as a server that lost them: a later `continue` gets `thread_not_found`. */
  forgetThreads(): void;
  /** How many replies are still queued. */
  readonly queued: number;
  /** How many streams are held at their `pauseAfterEvents` now. */
  readonly held: number;
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
  /**
   * Largest request body read, in bytes (default 32 MiB, the real API's limit for the Messages API); a larger one is
   * answered `413 request_too_large` without being buffered.
   */
  maxBodyBytes?: number | undefined;
  /** How long a client may take to send a whole request, in ms (default 60000, 0 for no limit); then Node answers 408. */
  requestTimeoutMs?: number | undefined;
}

/** The real API's request size limit for the Messages API. */
export const DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024;

export async function startFakeAnthropic(opts: FakeAnthropicOptions = {}): Promise<FakeAnthropic> {
  const host = opts.host ?? '127.0.0.1';
  const control = opts.control ?? true;
  const maxBodyBytes = opts.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const requestTimeoutMs = opts.requestTimeoutMs ?? 60_000;
  const state = new FakeState({
    defaultHandler: opts.handler ?? offlineHandler,
    startPacing: opts.eventDelayMs ?? 0,
    record: opts.record ?? true,
    strictAlternation: opts.strictAlternation ?? false,
    threadsSupported: opts.threads ?? true,
    maxThreads: opts.maxThreads ?? 100_000,
    apiKey: opts.apiKey,
  });
  const sockets = new Set<Socket>();

  const server = http.createServer(
    {
      requestTimeout: requestTimeoutMs,
      headersTimeout: Math.min(66_000, requestTimeoutMs),
      keepAliveTimeout: 65_000,
      // How often Node looks for requests past their timeout (its default, 30 s, would let a slow one live that long).
      connectionsCheckingInterval:
        requestTimeoutMs > 0 ? Math.max(50, Math.min(1000, requestTimeoutMs / 4)) : 30_000,
    },
    (req, res) => {
      const method = req.method ?? 'GET';
      const url = new URL(req.url ?? '/', 'http://fake');
      const path = url.pathname;
      const route = matchWire(method, path);
      const isControl = control && path.startsWith('/_fake/');
      if (!route && !isControl) {
        req.resume();
        return notFound(res, method, path);
      }
      const declared = Number(req.headers['content-length'] ?? 0);
      const chunks: Buffer[] = [];
      let size = 0;
      let tooLarge = declared > maxBodyBytes;
      req.on('data', (chunk: Buffer) => {
        if (tooLarge) return; // drained, not kept: the connection closes once the request ends
        size += chunk.length;
        if (size > maxBodyBytes) {
          tooLarge = true;
          chunks.length = 0;
          tooLargeReply(res, maxBodyBytes);
        } else chunks.push(chunk);
      });
      if (tooLarge) tooLargeReply(res, maxBodyBytes);
      req.on('end', () => {
        if (tooLarge) return;
        const raw = Buffer.concat(chunks).toString('utf8');
        if (!route) return handleControl(state, path, url, res, raw, method);
        handleMessages(state, inbound(route, path, raw, req.headers), res).catch((error: unknown) => {
          sendApiError(res, {
            status: 500,
            type: 'api_error',
            message: `fake server error: ${error instanceof Error ? error.message : String(error)}`,
          });
        });
      });
    },
  );
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
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('the fake listens on TCP');
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  return {
    url: `http://${urlHost}:${address.port}`,
    requests: state.requests,
    enqueue(...replies) {
      state.queue.push(...replies);
    },
    setHandler(fn) {
      state.handler = fn ?? state.settings.defaultHandler;
    },
    setPacing(eventDelayMs) {
      state.pacing = eventDelayMs;
    },
    resume() {
      state.resume();
    },
    waitForRequests(n, timeoutMs = 5000) {
      return state.waitForRequests(n, timeoutMs);
    },
    reset() {
      state.reset();
    },
    forgetThreads() {
      state.threads.clear();
    },
    get queued() {
      return state.queue.length;
    },
    get held() {
      return state.held;
    },
    close() {
      state.close();
      for (const socket of sockets) socket.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * `413 request_too_large`, as the real API answers, with `connection: close`: the rest of the body is read and
 * dropped (bounded by the request timeout) rather than the socket reset, so the client reads the answer.
 */
function tooLargeReply(res: http.ServerResponse, maxBodyBytes: number): void {
  sendJson(
    res,
    413,
    errorBody('request_too_large', `Request exceeds the maximum allowed number of bytes (${maxBodyBytes}).`),
    { connection: 'close' },
  );
}
