/**
 * The MCP transport's fetch, bounded: every answer's body is cut past a byte cap as it is read, and a call's SSE
 * stream that ends or breaks before its result fails that call at once. The call in flight is known through
 * `inCall` (an AsyncLocalStorage the pool's `callTool` runs in). The standalone stream (GET: the server's notices)
 * is bounded in bytes and in how often it is opened: the SDK opens it again at once, without limit, whenever the
 * server ends it (and after the delay the server's `retry:` names, 0 included), so a tenant's server could otherwise
 * keep this process reconnecting, or reading, for ever.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { FastifyBaseLogger } from 'fastify';
import type { Dispatcher } from 'undici';

/**
 * The call in flight in this async context: the transport's fetch reads it to tie a POST's response stream to its
 * call, so a stream cut before the result arrives (the server died mid-call) fails that call at once instead of
 * leaving it to wait for its timeout (the SDK resumes only streams that carry event ids, and ours fail at once).
 */
export const inCall = new AsyncLocalStorage<{ cut: (err: Error) => void }>();

/** A result (or an answer on the wire) larger than TOOL_RESULT_MAX_BYTES: the call's `is_error` names the limit. */
export class McpResultTooLarge extends Error {
  constructor(server: string, limit: number, what: string) {
    super(
      `the MCP server "${server}" ${what}; a tool result may have at most ${limit} bytes (TOOL_RESULT_MAX_BYTES)`,
    );
    this.name = 'McpResultTooLarge';
  }
}

/** A call whose response stream ended before its result (the server went away mid-call). */
export class McpCallCut extends Error {
  constructor(why: string) {
    super(why);
    this.name = 'McpCallCut';
  }
}

/** Bytes of one answer (one SSE event, or a JSON body) beyond which it is cut: room for JSON escapes and framing. */
const wireCap = (resultMaxBytes: number) => resultMaxBytes * 2 + 65_536;

/** Bytes a call's SSE stream carries in all (its result and its notices: progress, logs) before it is cut. */
const callStreamCap = (resultMaxBytes: number) => wireCap(resultMaxBytes) * 4;

/** Bytes one standalone stream carries before the service ends it (its notices are small: a list changed). */
export const STANDALONE_MAX_BYTES = 1_048_576;
/** Standalone streams a connection opens within STANDALONE_WINDOW_MS; past them it has none (as a 405 says). */
export const STANDALONE_OPENS = 3;
const STANDALONE_WINDOW_MS = 60_000;

/**
 * The transport's fetch. Every answer's body is bounded as it is read: an SSE event (or a JSON body) longer than
 * `wireCap` is cut there, never buffered whole; a call's answer cut so fails that call with `McpResultTooLarge`.
 * A POST made for a call (see `inCall`) whose answer is an SSE stream is watched: if it fails or ends while the
 * call still waits for its result, the call is failed at once. The result arrives on the stream before it ends
 * (the SDK hands each event on as it reads it), so a call still waiting a turn of the loop after the end will get
 * no result from this stream.
 */
export function boundedFetch(
  server: string,
  resultMaxBytes: number,
  log: Pick<FastifyBaseLogger, 'warn'>,
  dispatcher?: Dispatcher,
): typeof fetch {
  const cap = wireCap(resultMaxBytes);
  const callCap = callStreamCap(resultMaxBytes);
  /** When this connection's standalone streams were opened (ms), the newest STANDALONE_OPENS. */
  const opened: number[] = [];
  return async (input, init) => {
    const call = inCall.getStore();
    const standalone = init?.method === 'GET';
    if (standalone) {
      const now = Date.now();
      if (opened.length >= STANDALONE_OPENS && now - opened[0]! < STANDALONE_WINDOW_MS) {
        // The SDK takes a 405 as "no standalone stream here" and does not ask again on this connection; its tool
        // list is still listed again after MCP_TOOLS_TTL_MS.
        log.warn(
          { mcp_server: server, opened: opened.length, window_ms: STANDALONE_WINDOW_MS },
          "MCP server's notice stream ended too often; no more on this connection",
        );
        return new Response(null, { status: 405, statusText: 'Method Not Allowed' });
      }
      opened.push(now);
      if (opened.length > STANDALONE_OPENS) opened.shift();
    }
    // Node's fetch takes an undici dispatcher (not in the DOM's RequestInit type).
    const res = await fetch(input, dispatcher ? ({ ...init, dispatcher } as RequestInit) : init);
    if (!res.body) return res;
    const sse = (res.headers.get('content-type') ?? '').startsWith('text/event-stream');
    const watch = !!call && init?.method === 'POST' && sse;
    const reader = res.body.getReader();
    /** Bytes since the last event boundary (a blank line), or of the whole JSON body. */
    let pending = 0;
    const boundary = new SinceBoundary();
    /** Bytes of the whole answer. */
    let total = 0;
    const watched = new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const { value, done } = await reader.read();
          if (done) {
            controller.close();
            if (watch)
              setImmediate(() =>
                call.cut(new McpCallCut("the MCP server closed the call's stream before its result")),
              );
            return;
          }
          total += value.byteLength;
          pending = sse ? boundary.read(value) : pending + value.byteLength;
          if (standalone && (total > STANDALONE_MAX_BYTES || pending > cap)) {
            // Ended as a server ends it (not failed: a failed stream drops the connection, and with it the count of
            // opens): the SDK opens another, within the opens above.
            log.warn(
              { mcp_server: server, bytes: total },
              "MCP server's notice stream cut at its byte bound",
            );
            controller.close();
            void reader.cancel().catch(() => {});
            return;
          }
          if (pending > cap || (!standalone && sse && total > callCap)) {
            const err = new McpResultTooLarge(
              server,
              resultMaxBytes,
              pending > cap
                ? `sent an answer of more than ${cap} bytes`
                : `sent more than ${callCap} bytes on a call's stream`,
            );
            call?.cut(err);
            controller.error(err);
            void reader.cancel(err).catch(() => {});
            return;
          }
          controller.enqueue(value);
        } catch (err) {
          if (watch)
            call.cut(new McpCallCut(`the MCP server's connection broke during the call (${describe(err)})`));
          controller.error(err);
        }
      },
      cancel(reason) {
        return reader.cancel(reason);
      },
    });
    return new Response(watched, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/**
 * Bytes since the last SSE event boundary (`\n\n`, `\r\n\r\n`) of one answer, read chunk by chunk. A boundary may
 * be split across two reads (`\n` | `\n`, `\r\n\r` | `\n`, …), so the last two bytes read are kept.
 */
class SinceBoundary {
  /** Bytes since the last boundary. */
  pending = 0;
  /** The last two bytes read ([before-last, last]; 0 before any). */
  private readonly tail = [0, 0];

  read(chunk: Uint8Array): number {
    const n = chunk.byteLength;
    if (n === 0) return this.pending;
    const at = (i: number) => (i >= 0 ? chunk[i]! : this.tail[2 + i]!);
    let since = -1;
    for (let i = n - 1; i >= 0; i--) {
      if (at(i) === 0x0a && (at(i - 1) === 0x0a || (at(i - 1) === 0x0d && at(i - 2) === 0x0a))) {
        since = n - 1 - i;
        break;
      }
    }
    this.tail[0] = n >= 2 ? chunk[n - 2]! : this.tail[1]!;
    if (n >= 1) this.tail[1] = chunk[n - 1]!;
    this.pending = since >= 0 ? since : this.pending + n;
    return this.pending;
  }
}

export function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : '';
  return `${err.message}${cause}`.slice(0, 300);
}
