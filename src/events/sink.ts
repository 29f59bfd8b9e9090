import type { Writable } from 'node:stream';
import type { FastifyBaseLogger } from 'fastify';
import { type ErrorCode, DomainError, InvalidRequest, StoreUnavailable } from '../errors.js';
import type { Metrics } from '../observability/metrics.js';
import type { OutEvent } from './envelope.js';
import type { EventHub } from './hub.js';
import type { ExpiredInfo, Sink } from './reader.js';

/**
 * The rules every event stream follows, whatever carries it (SSE in routes/events.ts, WebSocket in
 * routes/stream.ts): when a reader is too slow, what an expired cursor or a failed read tells the client, and when
 * the stream ends. A transport only writes bytes, reports its queue, sends an error record and closes.
 */

/** Why a stream ends; each transport says it its own way (a WebSocket close code, an SSE end or drop). */
export type CloseReason =
  | 'session_deleted'
  | 'slow_reader'
  | 'cursor_expired'
  | 'store_unavailable'
  | 'shutting_down'
  /** The client token the stream was opened with expired, or was revoked (routes/stream.ts, routes/events.ts). */
  | 'token_expired'
  | 'token_revoked'
  /** `until=run_end`: the run stopped (a `session.status` other than `running` was sent). */
  | 'run_ended';

/**
 * The last record of a stream the server ends (SSE `event: end`, a WebSocket `{"type": "end"}` frame before the
 * close), so a client tells "the run ended" from "this connection closed, the session goes on": `final` says whether
 * reconnecting (with `last_event_id`) gets anything more. A connection lost without one (a proxy's cap, a network
 * cut, a slow reader dropped) is never final: reconnect.
 */
export interface EndFrame {
  type: 'end';
  reason: CloseReason;
  final: boolean;
  /** The id of the last event sent on this connection (null: none); resume after it. */
  last_event_id: string | null;
}

/** Whether nothing more will come for a client after a close for `reason` (else: reconnect after the last id). */
const FINAL: Record<CloseReason, boolean> = {
  session_deleted: true,
  run_ended: true,
  token_expired: true,
  token_revoked: true,
  slow_reader: false,
  cursor_expired: false,
  store_unavailable: false,
  shutting_down: false,
};

export const endFrame = (reason: CloseReason, lastEventId: string | null): EndFrame => ({
  type: 'end',
  reason,
  final: FINAL[reason],
  last_event_id: lastEventId,
});

/** A `session.status` event whose status is not `running`: the run it belongs to stopped. */
const stopsRun = (ev: OutEvent) =>
  ev.type === 'session.status' &&
  !/^\{"status":"running"/.test(ev.json.slice(ev.json.indexOf('"data":') + 7));

/** The token id a `client_token.revoked` event names (its `data.id`); '' when it names none. */
function revokedId(ev: OutEvent): string {
  try {
    const env = JSON.parse(ev.json) as { data?: { id?: unknown } | null };
    return typeof env.data?.id === 'string' ? env.data.id : '';
  } catch {
    return '';
  }
}

/** The error record a stream sends before it closes (SSE `event: error` data's `error`, a WS error frame's). */
export interface StreamError {
  code: ErrorCode;
  message: string;
  details?: unknown;
}

/** What a transport does itself. */
export interface Transport {
  readonly kind: 'sse' | 'ws';
  /** Still open for writes (not closing, not closed). */
  open(): boolean;
  /** Bytes queued for the client that the kernel has not taken yet. */
  buffered(): number;
  /** The stream to wait on while it is over its high-water mark (null: room, or gone). */
  needsDrain(): Writable | null;
  write(ev: OutEvent): void;
  /** Holds writes until `uncork`, so a batch goes out in one write. */
  cork(): void;
  uncork(): void;
  /** Sends an error record (the stream closes right after). */
  error(err: StreamError): void;
  close(reason: CloseReason): void;
}

export interface SinkContext {
  sessionId: string;
  /** `until=run_end`: the stream ends (`run_ended`) after the first event that says the run stopped. */
  untilRunEnd?: boolean;
  hub: EventHub;
  metrics: Metrics;
  log: FastifyBaseLogger;
  /** WS_MAX_BUFFER_BYTES: more than this queued for a client and it is cut off. */
  maxBuffered: number;
  /** SLOW_READER_TIMEOUT_MS: a paced replay that does not drain within this is cut off. */
  stallMs: number;
  /**
   * The watch of the client token the stream was opened with (src/plugins/auth.ts `watchToken`; absent or a no-op
   * for a tenant key): told of every `client_token.revoked` event the stream sends, it ends the stream when the
   * event names its token.
   */
  tokenWatch?: { revokedBy(id: string): boolean } | null;
}

/**
 * The hub's Sink for one client on `t`:
 * - **slow reader**: more than `maxBuffered` bytes queued when an event is to be sent, or a paced replay that did
 *   not drain within `stallMs`, closes the stream as `slow_reader` (counted, and the hub emits `slow-reader`); the
 *   client resumes from the id of the last event it got. Nothing is ever queued past the limit.
 * - **session.deleted** is the last event: the stream closes after it.
 * - **client_token.revoked** of the stream's own client token (`tokenWatch`) is the last event too: the watch ends
 *   the stream (an error record, then close `token_revoked`) before anything newer is sent, on whichever replica
 *   holds the stream — the revocation's place in the session's log is where every follower of the token stops.
 * - **expired cursor**: a `cursor_expired` error (how to recover in its details), then close.
 * - **failure** of the log read: `store_unavailable` (Redis unreachable) or `internal_error`, then close.
 */
export function streamSink(t: Transport, ctx: SinkContext): Sink {
  return new StreamSink(t, ctx);
}

/**
 * One per open stream, so its methods live on the prototype: a sink of closures cost every idle connection about
 * 0.5 kB more (docs/BENCHMARKS.md, B6). The hub calls them as methods.
 */
class StreamSink implements Sink {
  constructor(
    private readonly t: Transport,
    private readonly ctx: SinkContext,
  ) {}

  buffered(): number {
    return this.t.buffered();
  }

  cutOff(): void {
    if (this.t.open()) this.slowReader();
  }

  private slowReader(): void {
    this.ctx.metrics.slowReaderCloses.inc({ transport: this.t.kind });
    this.ctx.hub.emit('slow-reader', this.ctx.sessionId, this.t.kind);
    this.t.close('slow_reader');
  }

  cork(): void {
    this.t.cork();
  }

  uncork(): void {
    this.t.uncork();
  }

  send(ev: OutEvent): boolean {
    const t = this.t;
    if (!t.open()) return false;
    if (t.buffered() > this.ctx.maxBuffered) {
      this.slowReader();
      return false;
    }
    t.write(ev);
    if (ev.type === 'session.deleted') {
      t.close('session_deleted');
      return false;
    }
    // The watch ends the stream itself (its error record and close), synchronously: the hub sends nothing more.
    if (ev.type === 'client_token.revoked' && this.ctx.tokenWatch?.revokedBy(revokedId(ev))) return false;
    if (this.ctx.untilRunEnd && stopsRun(ev)) {
      t.close('run_ended');
      return false;
    }
    return true;
  }

  ready(): true | Promise<boolean> {
    const w = this.t.needsDrain();
    if (!w) return true;
    return drained(w, this.ctx.stallMs).then((ok) => {
      if (!ok && this.t.open()) this.slowReader();
      return ok;
    });
  }

  expired(info: ExpiredInfo): void {
    const err = cursorExpired(this.ctx.sessionId, info);
    this.t.error({ code: err.code, message: err.message, details: err.details });
    this.t.close('cursor_expired');
  }

  gone(): void {
    this.t.close('session_deleted');
  }

  failed(err: unknown): void {
    this.ctx.log.warn({ err, session: this.ctx.sessionId }, 'event stream failed');
    this.t.error(
      err instanceof StoreUnavailable
        ? storeUnavailable
        : { code: 'internal_error', message: 'The event stream failed.' },
    );
    this.t.close('store_unavailable');
  }

  shutdown(): void {
    this.t.close('shutting_down');
  }
}

/**
 * Resolves true once `w` drained; false if it closed first, or if it did not drain within `stallMs` (a reader that
 * stopped reading while its replay was paced: the caller closes it as a slow reader rather than wait forever).
 */
export function drained(w: Writable, stallMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => () => {
      clearTimeout(timer);
      w.off('drain', onDrain);
      w.off('close', onClose);
      resolve(ok);
    };
    const onDrain = done(true);
    const onClose = done(false);
    const timer = setTimeout(done(false), stallMs);
    w.once('drain', onDrain);
    w.once('close', onClose);
  });
}

/** The `cursor_expired` error, the same for the JSON pages (410), SSE (`event: error`) and WebSocket (close 4410). */
export function cursorExpired(sessionId: string, info: ExpiredInfo) {
  return new DomainError(
    'cursor_expired',
    `Events after ${info.cursor} were trimmed from this session's event log, which keeps its most recent events ` +
      `only. Read the durable history with GET /v1/sessions/${sessionId}/messages, then follow the log again ` +
      `from last_event_id (after=${info.last_event_id ?? '0'}), or without a cursor to replay what is retained.`,
    {
      cursor: info.cursor,
      first_event_id: info.first_event_id,
      last_event_id: info.last_event_id,
      history: `/v1/sessions/${sessionId}/messages`,
    },
  );
}

/**
 * A cursor past the newest event of the log (docs/API.md §6): 400 `invalid_cursor` on every transport, before any
 * stream starts. Such a cursor was never an id of this log (ids only grow), so waiting for it would hide a client's
 * bug or skip events written later with smaller ids.
 */
export function cursorAhead(cursor: string, lastEventId: string | null) {
  return new InvalidRequest(
    'invalid_cursor',
    `${cursor} is past the newest event of this session's log (${lastEventId ?? 'none'}): give the id of an ` +
      'event this log sent, or 0 for the start.',
    { cursor, last_event_id: lastEventId },
  );
}

export const storeUnavailable: StreamError = {
  code: 'store_unavailable',
  message: 'The session store is unavailable; reconnect with the id of the last event you saw.',
};

/**
 * Whether a request asks for Server-Sent Events (`Accept: text/event-stream`) rather than JSON: the media range is
 * listed (any case) with a `q` above 0 and not below `application/json`'s, when that is listed too (RFC 9110 §12.5.1).
 */
export function wantsEventStream(accept: string | undefined): boolean {
  let sse = 0;
  let json = 0;
  for (const range of (accept ?? '').split(',')) {
    const [type = '', ...params] = range.split(';');
    const media = type.trim().toLowerCase();
    if (media !== 'text/event-stream' && media !== 'application/json') continue;
    let q = 1;
    for (const p of params) {
      const [k = '', v = ''] = p.split('=');
      if (k.trim().toLowerCase() === 'q') q = Number(v.trim()) || 0;
    }
    if (media === 'text/event-stream') sse = Math.max(sse, q);
    else json = Math.max(json, q);
  }
  return sse > 0 && sse >= json;
}
