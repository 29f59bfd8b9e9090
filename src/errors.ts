import type { z } from 'zod';

/**
 * Every code the API answers an error with, by HTTP status: the closed set clients can rely on (`error.code` of a
 * JSON error, of an SSE `event: error`, of a WebSocket `error` frame). `DomainError` takes only these, so a new code is
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
  // 410, 412, 413, 415, 417, 422, 426
  'cursor_expired',
  'revision_mismatch',
  'payload_too_large',
  'unsupported_media_type',
  'expectation_failed',
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
  /** `request_id`: the answer's `x-request-id`, to quote (added by src/plugins/errors.ts to every error answer). */
  error: { code: ErrorCode; message: string; details?: unknown; request_id?: string };
}

export function errorBody(
  code: ErrorCode,
  message: string,
  details?: unknown,
  requestId?: string,
): ErrorBody {
  const error: ErrorBody['error'] = details === undefined ? { code, message } : { code, message, details };
  if (requestId !== undefined) error.request_id = requestId;
  return { error };
}

/**
 * What the store, the engine and the operations behind the routes throw when they refuse: a `code` from
 * `ERROR_CODES`, a message and `details` for the error envelope, `cause` (a Redis or upstream error) for the log.
 * They say nothing of HTTP: only the HTTP layer (src/plugins/errors.ts, with the status of each code in
 * src/plugins/error-status.ts) turns one into a status and the `{"error": {...}}` envelope. Code that must tell one
 * refusal from another uses the subclasses below (`instanceof`), never the code's text.
 */
export class DomainError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: unknown,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** What a not-found names; its code is `<what>_not_found`. */
export type NotFoundKind =
  | 'session'
  | 'iteration'
  | 'webhook'
  | 'file'
  | 'mcp_server'
  | 'tool'
  | 'task'
  | 'client_token'
  | 'schedule'
  | 'route';

/** What a kind's resources are addressed by in their routes (an id unless named here). */
const ADDRESSED_BY: Partial<Record<NotFoundKind, string>> = {
  tool: 'name',
  mcp_server: 'name',
  file: 'path',
};

/** Nothing of this kind has this id (or name, path): `<kind>_not_found`. */
export class NotFound extends DomainError {
  constructor(
    readonly kind: NotFoundKind,
    message = `No ${kind.replace('_', ' ')} with this ${ADDRESSED_BY[kind] ?? 'id'}.`,
    details?: unknown,
  ) {
    super(`${kind}_not_found`, message, details);
  }
}

/** The session (or webhook, task, idempotency record) is not in a state that allows the request. */
export class Conflict extends DomainError {}

/** A guarded write found the session in another status (`details.status`). */
export class InvalidStatus extends Conflict {
  constructor(readonly status: string) {
    super('invalid_status', `Not possible while the session is ${status}.`, { status });
  }
}

/** A create found a session with its id (a deterministic id: a schedule's fire, a sub-agent's call). */
export class SessionExists extends Conflict {
  constructor() {
    super('session_exists', 'A session with this id exists.');
  }
}

/** A write guarded by a revision (If-Match) found another one: `details.revision` is the current one. */
export class RevisionMismatch extends DomainError {
  constructor(
    readonly revision: number,
    what: 'session' | 'webhook' | 'tool' | 'MCP server' | 'schedule' = 'session',
  ) {
    super('revision_mismatch', `The ${what} is at revision ${revision}.`, { revision });
  }
}

/**
 * A tenant's quota (a config variable's) or rate is used up: `quota_exceeded` or `rate_limited`. `retryAfterS`, when
 * known: the seconds after which asking again may find room (the HTTP layer answers it as `retry-after`).
 */
export class QuotaExceeded extends DomainError {
  readonly retryAfterS: number | undefined;
  constructor(
    code: ErrorCode,
    message: string,
    details?: unknown,
    options: { cause?: unknown; retryAfterS?: number } = {},
  ) {
    const { retryAfterS, ...errorOptions } = options;
    super(code, message, details, errorOptions);
    this.retryAfterS = retryAfterS;
  }
}

/** A 429 of the quota named (`details.quota`). */
export const isQuota = (err: unknown, quota: string): boolean =>
  err instanceof QuotaExceeded && (err.details as { quota?: unknown } | undefined)?.quota === quota;

/** The request itself is refused for what it holds (the 400 codes; a turn over MAX_TURN_BYTES), past the route's own validation. */
export class InvalidRequest extends DomainError {}

/** The one message of `store_unavailable` to a request (HTTP or a WebSocket frame). */
export const STORE_UNAVAILABLE_MESSAGE = 'The session store is unavailable; try again shortly.';

/** Redis did not answer or refused writes for a while (see src/store/unavailable.ts); `cause` is its error. */
export class StoreUnavailable extends DomainError {
  constructor(cause: unknown) {
    super('store_unavailable', STORE_UNAVAILABLE_MESSAGE, undefined, { cause });
  }
}

/** Something failed on our side (`internal_error`): `cause` says what, for the log. */
export class InternalError extends DomainError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('internal_error', message, undefined, options);
  }
}

/**
 * Raised by the store when a fenced write comes from a process that no longer owns the run: the engine stops that
 * run. Never a refusal of a request (one that reaches the HTTP layer is a bug there: a 500 whose text stays in the
 * log).
 */
export class FencedOut extends InternalError {
  constructor(readonly sessionId: string) {
    super(`lost ownership of session ${sessionId}`);
  }
}

/** Whether `err` is a refusal (the request or the state is at fault), not a failure of the service. */
export const isRefusal = (err: unknown): err is DomainError =>
  err instanceof DomainError && !(err instanceof InternalError) && !(err instanceof StoreUnavailable);

/** `quota_exceeded`: the tenant holds `limit` of what `quota` (a config variable's name) counts. */
export const quotaExceeded = (quota: string, limit: number, what: string) =>
  new QuotaExceeded('quota_exceeded', `The tenant already has ${limit} ${what}, the most ${quota} allows.`, {
    quota,
    limit,
  });

export const badRequest = (message: string, details?: unknown) =>
  new InvalidRequest('invalid_request', message, details);

export const notFound = (what: NotFoundKind = 'session') => new NotFound(what);

export const conflict = (code: ErrorCode, message: string, details?: unknown) =>
  new Conflict(code, message, details);

export const revisionMismatch = (current: number) => new RevisionMismatch(current);

/** Zod issues as the error envelope's `details`: `{path, code, message}` with a JSON-pointer path, as route validation gives. */
export function zodDetails(issues: readonly z.core.$ZodIssue[], prefix: Array<string | number> = []) {
  return issues.map((i) => ({
    path: `/${[...prefix, ...i.path].map(String).join('/')}`,
    code: i.code,
    message: i.message,
  }));
}
