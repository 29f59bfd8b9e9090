import { ApiError, ConnectionError, CursorExpiredError, type ErrorBody } from './errors.js';
import { backoffMs, sleep } from './http.js';
import type { components } from './openapi.js';

export type Event = components['schemas']['Event'];

/**
 * The part of the WebSocket API the client uses: the browser's global WebSocket, Node ≥ 22's, and the `ws`
 * package's all fit. (Handlers take `never` so that each implementation's own event types are accepted.)
 */
export interface WebSocketLike {
  readonly readyState: number;
  onopen: ((ev: never) => void) | null;
  onmessage: ((ev: never) => void) | null;
  onclose: ((ev: never) => void) | null;
  onerror: ((ev: never) => void) | null;
  close(code?: number, reason?: string): void;
}
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

export interface FollowOptions {
  /** Start after this event id (`0`, or absent: every event the log retains). */
  after?: string | undefined;
  /** Stops following: the iterator ends by throwing the signal's reason. */
  signal?: AbortSignal | undefined;
  /** Reconnections in a row without receiving an event before giving up (default: no limit). */
  maxReconnects?: number | undefined;
  /**
   * Told about each WebSocket the follow opens: `connecting` when it opens one, `open` once the server accepted it,
   * `closed` (with the close code) when it ends, whether a reconnection follows or not. For a page that shows the
   * connection to a person; the events themselves come from the iterator only.
   */
  onConnection?: ((state: ConnectionState, info?: { code: number }) => void) | undefined;
  /**
   * Most bytes of events received and not yet taken from the iterator (default 8 MiB). A loop slower than the
   * session passes it: the socket is closed (4000 `client_behind`) and the follow reconnects after the last event it
   * yielded, so memory stays bounded and nothing is missed or repeated.
   */
  maxBufferedBytes?: number | undefined;
}

/** Default of `maxBufferedBytes`. */
const MAX_BUFFERED_BYTES = 8 * 1024 * 1024;
/** The close code a follow gives a socket it read ahead of its loop (not final: it reconnects). */
const BEHIND = 4000;

export type ConnectionState = 'connecting' | 'open' | 'closed';

export interface FollowContext {
  baseUrl: string;
  apiKey?: string | undefined;
  WebSocket: WebSocketConstructor;
  /**
   * Asks the REST API why a connection failed: throws an ApiError when the session cannot be followed from `after`
   * (the cursor the refused upgrade carried: unknown session, wrong key, a malformed cursor or one past the log).
   */
  check(sessionId: string, after: string | undefined): Promise<void>;
}

type Item =
  | { kind: 'event'; event: Event; bytes: number }
  | { kind: 'error'; error: ErrorBody }
  | { kind: 'invalid'; error: ConnectionError }
  | { kind: 'close'; code: number; reason: string; opened: boolean };

/** Event ids are `<ms>-<seq>`: true when `a` comes after `b`. */
export function isAfter(a: string, b: string): boolean {
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am !== bm ? am > bm : as > bs;
}

/** Close codes after which following is over: 1000 the session was deleted, 4410 the cursor expired. */
const FINAL = new Set([1000, 4410]);

/**
 * `follow()`: the events of a session, over the WebSocket, from `after` on and then live, each exactly once.
 *
 * When the connection drops (the replica stops: 1001; Redis trouble: 1011; too slow a reader: 1013; a crash or a
 * network failure: 1006), it reconnects with a backoff and resumes after the id of the last event it yielded, so
 * nothing is missed; an event the server sends again (at or before that id) is skipped, so nothing comes twice.
 * The iterator ends after `session.deleted`; it throws a CursorExpiredError when the log no longer holds the
 * cursor, and an ApiError when the session cannot be followed from the cursor (401, 404, 400 `invalid_request` for a
 * malformed `after`, 400 `invalid_cursor` for one past the newest event): asked over HTTP, with the same cursor,
 * when an upgrade is refused, since a browser does not show why; a ConnectionError at a frame that is not a JSON
 * object (not the API). Breaking out of the `for await` closes the socket.
 */
export async function* follow(
  ctx: FollowContext,
  sessionId: string,
  options: FollowOptions = {},
): AsyncGenerator<Event, void, undefined> {
  let last = options.after;
  const { signal } = options;
  let failures = 0;
  for (;;) {
    signal?.throwIfAborted();
    const conn = connect(
      ctx,
      sessionId,
      last,
      options.onConnection,
      options.maxBufferedBytes ?? MAX_BUFFERED_BYTES,
    );
    let closed: Extract<Item, { kind: 'close' }>;
    let frameError: ErrorBody | undefined;
    try {
      for (;;) {
        const item = await conn.next(signal);
        if (item.kind === 'close') {
          closed = item;
          break;
        }
        if (item.kind === 'error') {
          frameError = item.error;
          continue;
        }
        // Not the API: following on (or connecting again) would read the same. The socket is closed below.
        if (item.kind === 'invalid') throw item.error;
        const ev = item.event;
        if (last !== undefined && last !== '0' && !isAfter(ev.id, last)) continue;
        last = ev.id;
        failures = 0;
        yield ev;
        if (ev.type === 'session.deleted') return;
      }
    } finally {
      conn.close();
    }
    if (closed.code === 4410) {
      throw new CursorExpiredError(410, frameError ?? { code: 'cursor_expired', message: closed.reason });
    }
    if (FINAL.has(closed.code)) return;
    if (!closed.opened) {
      try {
        await ctx.check(sessionId, last);
      } catch (err) {
        // Refusals are final; a service that is away (restarting, overloaded) is tried again.
        if (err instanceof ApiError && err.status < 500 && err.status !== 429) throw err;
      }
    }
    failures++;
    if (options.maxReconnects !== undefined && failures > options.maxReconnects) {
      throw new ConnectionError(
        `lost the event stream of ${sessionId} ${failures} times in a row (last close ${closed.code})`,
      );
    }
    await sleep(backoffMs(failures - 1, 100), signal);
  }
}

function streamUrl(baseUrl: string, sessionId: string, after: string | undefined): string {
  const url = new URL(`v1/sessions/${encodeURIComponent(sessionId)}/stream`, baseUrl.replace(/\/?$/, '/'));
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  if (after !== undefined) url.searchParams.set('after', after);
  return url.toString();
}

/** One WebSocket connection as a queue of items, read with `next()`. */
function connect(
  ctx: FollowContext,
  sessionId: string,
  after: string | undefined,
  onConnection: FollowOptions['onConnection'],
  maxBuffered: number,
) {
  const queue: Item[] = [];
  /** Bytes of the events in `queue`; past `maxBuffered` the socket is closed and nothing more is queued. */
  let buffered = 0;
  let behind = false;
  let wake: (() => void) | null = null;
  const push = (item: Item) => {
    queue.push(item);
    wake?.();
    wake = null;
  };
  let opened = false;
  onConnection?.('connecting');
  // Browsers cannot set headers on a WebSocket: the key travels as the subprotocol pair `bearer, <key>`.
  const ws = new ctx.WebSocket(
    streamUrl(ctx.baseUrl, sessionId, after),
    ctx.apiKey ? ['bearer', ctx.apiKey] : [],
  );
  ws.onopen = () => {
    opened = true;
    onConnection?.('open');
  };
  ws.onmessage = (m: { data: unknown }) => {
    if (typeof m.data !== 'string' || behind) return;
    // Every text frame of the service is a JSON object (an event, an error or end record, a ping). Anything else is
    // not the API: the follow ends with a ConnectionError rather than skip it (an event could be lost unseen) or
    // throw in this handler (which nothing would catch).
    let frame: { id?: unknown; session_id?: unknown; type?: unknown; error?: ErrorBody };
    try {
      const parsed: unknown = JSON.parse(m.data);
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
        throw new TypeError(`a frame that is not a JSON object: ${m.data.slice(0, 80)}`);
      }
      frame = parsed as typeof frame;
    } catch (err) {
      const error = new ConnectionError(
        `the event stream of ${sessionId} sent a frame that is not the API's: ${(err as Error).message}`,
        { cause: err },
      );
      push({ kind: 'invalid', error });
      return;
    }
    if (typeof frame.id === 'string' && typeof frame.session_id === 'string') {
      push({ kind: 'event', event: frame as Event, bytes: m.data.length });
      buffered += m.data.length;
      if (buffered > maxBuffered) {
        // The loop is behind: what is queued is yielded, then the follow reconnects after its last event.
        behind = true;
        ws.close(BEHIND, 'client_behind');
      }
    } else if (frame.type === 'error' && frame.error) {
      push({ kind: 'error', error: frame.error });
    }
  };
  ws.onerror = () => {
    /* a close follows */
  };
  ws.onclose = (e: { code: number; reason: string }) => {
    onConnection?.('closed', { code: e.code });
    push({ kind: 'close', code: e.code, reason: e.reason, opened });
  };
  return {
    async next(signal: AbortSignal | undefined): Promise<Item> {
      while (queue.length === 0) {
        signal?.throwIfAborted();
        await new Promise<void>((resolve, reject) => {
          const onAbort = () => reject(signal!.reason);
          wake = () => {
            signal?.removeEventListener('abort', onAbort);
            resolve();
          };
          signal?.addEventListener('abort', onAbort, { once: true });
        });
      }
      const item = queue.shift()!;
      if (item.kind === 'event') buffered -= item.bytes;
      return item;
    },
    close() {
      // CONNECTING (0) or OPEN (1)
      if (ws.readyState <= 1) ws.close(1000);
    },
  };
}
