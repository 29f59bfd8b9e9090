import type { z } from 'zod';

/**
 * Every code the API answers an error with, by HTTP status: the closed set clients can rely on (`error.code` of a
 * JSON error, of an SSE `event: error`, of a WebSocket `error` frame). `AppError` takes only these, so a new code is
 * added here first, where it is seen next to the others.
 */
export const ERROR_CODES = [
  // 400
  'invalid_request',
  'invalid_json',
  'invalid_cursor',
  'invalid_history',
  'invalid_tool_input',
  'invalid_webhook_url',
  'invalid_frame',
  'duplicate_tool',
  'unknown_tool',
  'tool_name_conflict',
  'invalid_memory_path',
  'request_aborted',
  'unknown_model_price',
  // 401, 403
  'unauthorized',
  'token_expired',
  'origin_not_allowed',
  'scope_denied',
  // 421
  'host_not_allowed',
  // 404
  'session_not_found',
  'iteration_not_found',
  'webhook_not_found',
  'tool_not_found',
  'task_not_found',
  'file_not_found',
  'mcp_server_not_found',
  'schedule_not_found',
  'client_token_not_found',
  'route_not_found',
  // 409: the session (or webhook, or idempotency record) is not in a state that allows the request
  'session_exists',
  'invalid_status',
  'session_running',
  'session_not_running',
  'session_not_failed',
  'nothing_to_retry',
  'session_not_replaceable',
  'nothing_to_continue',
  'nothing_awaits_approval',
  'nothing_awaits_results',
  'approval_not_required',
  'tool_call_already_decided',
  'tool_calls_undecided',
  'tool_result_already_submitted',
  'tool_result_not_expected',
  'unknown_tool_use_id',
  'budget_exhausted',
  'tool_call_pending',
  'webhook_disabled',
  'idempotency_in_progress',
  'compaction_pending',
  'nothing_to_compact',
  'unanswered_tool_calls',
  'task_lease_lost',
  'task_already_completed',
  'task_cancelled',
  'action_timed_out',
  // 410, 412, 413, 415, 422, 426
  'cursor_expired',
  'revision_mismatch',
  'payload_too_large',
  'unsupported_media_type',
  'idempotency_key_reused',
  'upgrade_required',
  // 431
  'headers_too_large',
  // 429
  'rate_limited',
  'quota_exceeded',
  // 5xx
  'internal_error',
  'store_unavailable',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/** The `{"error": {...}}` envelope every error answer has. */
export interface ErrorBody {
  error: { code: ErrorCode; message: string; details?: unknown };
}

export function errorBody(code: ErrorCode, message: string, details?: unknown): ErrorBody {
  return { error: details === undefined ? { code, message } : { code, message, details } };
}

/**
 * Typed errors with a stable `code` from `ERROR_CODES`. The error handler turns an AppError into
 * `{"error": {"code", "message", "details"?}}` with its status; anything else is a 500 whose internals stay in the
 * log. `cause` keeps the error this one stands for (a Redis or upstream error), for the log.
 */
export class AppError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: ErrorCode,
    message: string,
    readonly details?: unknown,
    readonly headers?: Record<string, string>,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'AppError';
  }
}

/** 429 `quota_exceeded`: the tenant holds `limit` of what `quota` (a config variable's name) counts. */
export const quotaExceeded = (quota: string, limit: number, what: string) =>
  new AppError(429, 'quota_exceeded', `The tenant already has ${limit} ${what}, the most ${quota} allows.`, {
    quota,
    limit,
  });

export const badRequest = (message: string, details?: unknown) =>
  new AppError(400, 'invalid_request', message, details);

/** What a 404 names; its code is `<what>_not_found`. */
export type NotFoundKind =
  'session' | 'iteration' | 'webhook' | 'file' | 'mcp_server' | 'tool' | 'task' | 'client_token';

export const notFound = (what: NotFoundKind = 'session') =>
  new AppError(404, `${what}_not_found`, `No ${what} with this id.`);

export const conflict = (code: ErrorCode, message: string, details?: unknown) =>
  new AppError(409, code, message, details);

export const revisionMismatch = (current: number) =>
  new AppError(412, 'revision_mismatch', `The session is at revision ${current}.`, { revision: current });

/** The one message of `store_unavailable` to a request (HTTP or a WebSocket frame). */
export const STORE_UNAVAILABLE_MESSAGE = 'The session store is unavailable; try again shortly.';

/** Raised by the store when a fenced write comes from a process that no longer owns the run. */
export class FencedOut extends Error {
  constructor(readonly sessionId: string) {
    super(`lost ownership of session ${sessionId}`);
    this.name = 'FencedOut';
  }
}

/** Zod issues as the error envelope's `details`: `{path, code, message}` with a JSON-pointer path, as route validation gives. */
export function zodDetails(issues: readonly z.core.$ZodIssue[], prefix: Array<string | number> = []) {
  return issues.map((i) => ({
    path: `/${[...prefix, ...i.path].map(String).join('/')}`,
    code: i.code,
    message: i.message,
  }));
}
