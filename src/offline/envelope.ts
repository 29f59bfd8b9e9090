/** Ids and the error envelope of the Messages API, as the offline model and the fake write them. */
import { randomUUID } from 'node:crypto';

/** 24 hex characters, for message, tool-use and request ids. */
export function shortId(): string {
  return randomUUID().replace(/-/g, '').slice(0, 24);
}

/** The API's error body: `{type: "error", error: {type, message, details?}}`, as JSON text. */
export function errorBody(type: string, message: string, details?: Record<string, unknown>): string {
  const error: Record<string, unknown> = { type, message };
  if (details) error['details'] = details;
  return JSON.stringify({ type: 'error', error });
}
