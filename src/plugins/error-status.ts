import { DomainError, type ErrorCode } from '../errors.js';

/**
 * The HTTP status of each error code: the one place a domain error becomes a status (the error handler,
 * src/plugins/errors.ts) and where the OpenAPI document finds which codes a status can carry
 * (src/openapi/responses.ts). `satisfies` keeps it complete: a code added to `ERROR_CODES` fails the typecheck
 * until it has its status here.
 */
export const ERROR_STATUS = {
  invalid_request: 400,
  invalid_json: 400,
  invalid_cursor: 400,
  invalid_history: 400,
  invalid_tool_input: 400,
  invalid_webhook_url: 400,
  invalid_frame: 400,
  duplicate_tool: 400,
  unknown_tool: 400,
  tool_name_conflict: 400,
  invalid_memory_path: 400,
  request_aborted: 400,
  unknown_model_price: 400,
  unauthorized: 401,
  token_expired: 401,
  origin_not_allowed: 403,
  scope_denied: 403,
  host_not_allowed: 421,
  session_not_found: 404,
  iteration_not_found: 404,
  webhook_not_found: 404,
  tool_not_found: 404,
  task_not_found: 404,
  file_not_found: 404,
  mcp_server_not_found: 404,
  schedule_not_found: 404,
  client_token_not_found: 404,
  route_not_found: 404,
  session_exists: 409,
  invalid_status: 409,
  session_running: 409,
  session_not_running: 409,
  session_not_failed: 409,
  nothing_to_retry: 409,
  session_not_replaceable: 409,
  nothing_to_continue: 409,
  nothing_awaits_approval: 409,
  nothing_awaits_results: 409,
  approval_not_required: 409,
  tool_call_already_decided: 409,
  tool_calls_undecided: 409,
  tool_result_already_submitted: 409,
  tool_result_not_expected: 409,
  unknown_tool_use_id: 409,
  budget_exhausted: 409,
  tool_call_pending: 409,
  webhook_disabled: 409,
  idempotency_in_progress: 409,
  compaction_pending: 409,
  nothing_to_compact: 409,
  unanswered_tool_calls: 409,
  task_lease_lost: 409,
  task_already_completed: 409,
  task_cancelled: 409,
  action_timed_out: 409,
  cursor_expired: 410,
  revision_mismatch: 412,
  payload_too_large: 413,
  unsupported_media_type: 415,
  expectation_failed: 417,
  idempotency_key_reused: 422,
  upgrade_required: 426,
  headers_too_large: 431,
  rate_limited: 429,
  quota_exceeded: 429,
  internal_error: 500,
  store_unavailable: 503,
} as const satisfies Record<ErrorCode, number>;

/**
 * Codes a route answers with another status than their own, and which (an `HttpRefusal` with its `status`): the
 * document may list them there too (src/openapi/responses.ts checks a route's codes against these two maps).
 */
const OTHER_STATUSES: Partial<Record<ErrorCode, readonly number[]>> = {
  // PUT /v1/tools/{name} naming a server tool: the name is taken (409); a session's `tools` naming one twice is 400.
  tool_name_conflict: [409],
  // @fastify/static's refusals of a precondition (412) or a range (416) on /docs/static, through the error
  // handler's fallback for a plugin's client error.
  invalid_request: [412, 416],
};

/** Whether `code` may be answered with `status`. */
export const answersWith = (code: ErrorCode, status: number): boolean =>
  ERROR_STATUS[code] === status || (OTHER_STATUSES[code]?.includes(status) ?? false);

/** A refusal made by the HTTP layer itself (auth, limits) with headers of its answer (`www-authenticate`, `retry-after`). */
export class HttpRefusal extends DomainError {
  constructor(
    code: ErrorCode,
    message: string,
    details?: unknown,
    readonly headers?: Record<string, string>,
    /** Another status than the code's own (OTHER_STATUSES). */
    readonly status?: number,
  ) {
    super(code, message, details);
  }
}

/** 401 `token_expired`: the client token's time is up (an open stream ends with the reason `token_expired`). */
export class TokenExpired extends HttpRefusal {
  constructor(message: string, details?: unknown, headers?: Record<string, string>) {
    super('token_expired', message, details, headers);
  }
}
