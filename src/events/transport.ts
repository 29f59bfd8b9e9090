import type { Writable } from 'node:stream';
import { AppError, type ErrorCode } from '../errors.js';
import type { ExpiredInfo } from './hub.js';

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
export function cursorExpired(sessionId: string, info: Omit<ExpiredInfo, 'cursor'> & { cursor: string }) {
  return new AppError(
    410,
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

export const errorBody = (err: AppError) => ({
  code: err.code,
  message: err.message,
  ...(err.details !== undefined ? { details: err.details } : {}),
});

export const storeUnavailable: { code: ErrorCode; message: string } = {
  code: 'store_unavailable',
  message: 'The session store is unavailable; reconnect with the id of the last event you saw.',
};
