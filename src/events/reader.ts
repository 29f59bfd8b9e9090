/**
 * What the hub asks of the transport of one reader (a WebSocket or an SSE response): send an event, pace the replay,
 * and say how the stream ended. src/events/sink.ts builds the one the routes use.
 */
import type { OutEvent } from './envelope.js';

export interface ExpiredInfo {
  /** The cursor the client gave. */
  cursor: string;
  first_event_id: string | null;
  last_event_id: string | null;
}

/** Where a subscription's events go: a WebSocket or an SSE response. */
export interface Sink {
  /**
   * Sends one event. Returns false when the sink cannot take more and closed itself (slow reader, socket gone,
   * end of the session): the subscription then stops.
   */
  send(ev: OutEvent): boolean;
  /** Optional: hold writes until `uncork`, so a batch of events goes out in one write. */
  cork?(): void;
  uncork?(): void;
  /**
   * Replay pacing: true at once when the transport has room, else resolves when drained (false: closed, or closed by
   * the sink as a slow reader because it did not drain in time).
   */
  ready(): true | Promise<boolean>;
  /** The cursor was trimmed away; the sink tells the client how to recover and closes. */
  expired(info: ExpiredInfo): void;
  /** The session's log is gone (deleted, its last event expired): the sink closes as after `session.deleted`. */
  gone(): void;
  /** The store failed (Redis down); the sink closes so the client reconnects later. */
  failed(err: unknown): void;
  /** The process shuts down. */
  shutdown(): void;
  /** Optional: the bytes its transport holds queued for the client (for its tenant's bound, tenant-buffers.ts). */
  buffered?(): number;
  /** Optional: its tenant's streams hold too much queued and this one is behind: it closes as a slow reader. */
  cutOff?(): void;
}
