/**
 * The `/_fake/*` control routes, for a fake in another process: enqueue replies, read the recorded requests, reset,
 * set the pacing or the script, forget threads, and read counters.
 */
import type http from 'node:http';
import { parseScript } from './script.js';
import { sendApiError, sendJson } from './respond.js';
import type { FakeState } from './state.js';
import { unchecked } from './validate.js';
import type { FakeReply } from '../../src/offline/wire.js';

export function handleControl(
  state: FakeState,
  path: string,
  url: URL,
  res: http.ServerResponse,
  raw: string,
  method: string,
): void {
  const parse = (): unknown => (raw ? JSON.parse(raw) : undefined);
  try {
    if (method === 'POST' && path === '/_fake/enqueue') {
      const input = parse();
      const replies: unknown[] = Array.isArray(input) ? input : [input];
      if (!replies.every(isFakeReply)) {
        throw new Error(
          'each reply needs {type:"message",content:[...]}, {type:"error",status,errorType} or {type:"hang"}',
        );
      }
      state.queue.push(...replies);
      return sendJson(res, 200, JSON.stringify({ queued: state.queue.length }));
    }
    if (method === 'GET' && path === '/_fake/requests') {
      const since = Number(url.searchParams.get('since') ?? 0) || 0;
      return sendJson(res, 200, JSON.stringify(state.requests.slice(since)));
    }
    if (method === 'POST' && path === '/_fake/reset') {
      state.reset();
      return sendJson(res, 200, '{"ok":true}');
    }
    if (method === 'POST' && path === '/_fake/pacing') {
      const value = Number(unchecked<'eventDelayMs'>(parse())?.eventDelayMs);
      if (!Number.isFinite(value) || value < 0) throw new Error('eventDelayMs must be a number >= 0');
      state.pacing = value;
      return sendJson(res, 200, JSON.stringify({ eventDelayMs: state.pacing }));
    }
    if (method === 'POST' && path === '/_fake/forget-threads') {
      state.threads.clear();
      return sendJson(res, 200, '{"ok":true}');
    }
    if (method === 'POST' && path === '/_fake/script') {
      const script = unchecked<'script'>(parse())?.script;
      state.handler = script == null ? state.settings.defaultHandler : parseScript(String(script));
      return sendJson(res, 200, '{"ok":true}');
    }
    if (method === 'GET' && path === '/_fake/stats') {
      return sendJson(
        res,
        200,
        JSON.stringify({
          requests: state.received,
          queued: state.queue.length,
          threads: state.threads.size,
          eventDelayMs: state.pacing,
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
}

export function notFound(res: http.ServerResponse, method: string, path: string): void {
  sendApiError(res, { status: 404, type: 'not_found_error', message: `Not found: ${method} ${path}` });
}

/** Whether `value` has the shape of a scripted reply (its fields are used as sent). */
function isFakeReply(value: unknown): value is FakeReply {
  const reply = unchecked<'type' | 'content' | 'status' | 'errorType'>(value);
  return (
    (reply?.type === 'message' && Array.isArray(reply.content)) ||
    (reply?.type === 'error' && Number.isInteger(reply.status) && typeof reply.errorType === 'string') ||
    reply?.type === 'hang'
  );
}
