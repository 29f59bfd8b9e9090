/**
 * Errors of the client: every non-2xx answer of the service becomes an `ApiError` carrying the contract's
 * `{error: {code, message, details?}}`, with the HTTP status, `Retry-After` (in ms) when the service gave one, and
 * the request id. Subclasses for the answers a program usually handles apart.
 */
import type { components } from './openapi.js';

/**
 * The service's error codes: the closed set of the OpenAPI document (generated from the server's one list, so it
 * cannot fall behind); a newer service may send others.
 */
export type ErrorCode = components['schemas']['Error']['error']['code'] | (string & Record<never, never>);

export interface ErrorBody {
  code: ErrorCode;
  message: string;
  details?: unknown;
}

export class ApiError extends Error {
  override readonly name: string = 'ApiError';
  readonly code: ErrorCode;
  readonly details: unknown;

  constructor(
    readonly status: number,
    body: ErrorBody,
    /** Milliseconds the service asked to wait (`Retry-After`), when it did. */
    readonly retryAfterMs?: number,
    readonly requestId?: string,
    options?: { cause?: unknown },
  ) {
    super(body.message, options);
    this.code = body.code;
    this.details = body.details;
  }

  /** Whether `err` is an ApiError, with one of `codes` when given. */
  static is(err: unknown, ...codes: ErrorCode[]): err is ApiError {
    return err instanceof ApiError && (codes.length === 0 || codes.includes(err.code));
  }
}

/** 412 `revision_mismatch`: `revision` is the session's current one. */
export class RevisionMismatchError extends ApiError {
  override readonly name = 'RevisionMismatchError';
  get revision(): number | undefined {
    const d = this.details as { revision?: unknown } | undefined;
    return typeof d?.revision === 'number' ? d.revision : undefined;
  }
}

/** 404: no such session (also another tenant's), iteration or route. */
export class NotFoundError extends ApiError {
  override readonly name = 'NotFoundError';
}

/** 409: the request does not fit the session's state; `code` says why. */
export class ConflictError extends ApiError {
  override readonly name = 'ConflictError';
}

/** 410 `cursor_expired`: the events after the cursor were trimmed; `details` says how to recover. */
export class CursorExpiredError extends ApiError {
  override readonly name = 'CursorExpiredError';
}

/** 429 (`rate_limited`, `quota_exceeded`) and 503 (`store_unavailable`) once the retries are used up. */
export class RetryableError extends ApiError {
  override readonly name = 'RetryableError';
}

/** The service could not be reached (after the retries), or answered something that is not the API. */
export class ConnectionError extends Error {
  override readonly name = 'ConnectionError';
}

/** The ApiError subclass for a status. */
export function apiError(
  status: number,
  body: ErrorBody,
  retryAfterMs?: number,
  requestId?: string,
): ApiError {
  const Class =
    status === 412
      ? RevisionMismatchError
      : status === 404
        ? NotFoundError
        : status === 409
          ? ConflictError
          : status === 410
            ? CursorExpiredError
            : status === 429 || status === 503
              ? RetryableError
              : ApiError;
  return new Class(status, body, retryAfterMs, requestId);
}

/**
 * `Retry-After` in ms: delay-seconds (digits; a fraction is taken too), or an HTTP-date (RFC 9110 §10.2.3; one past
 * is 0). Anything else (`-5`, `NaN`, `0x10`, a bare number `Date.parse` would read as a year) is no delay: undefined,
 * so the caller backs off on its own instead of retrying at once.
 */
export function retryAfterMs(value: string | null, now = Date.now()): number | undefined {
  const v = value?.trim() ?? '';
  if (/^\d+(?:\.\d+)?$/.test(v)) return Number(v) * 1000;
  // An HTTP-date names its weekday or month: "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 …", asctime.
  if (!/[a-z]{3}/i.test(v)) return undefined;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** The error of a non-2xx Response (reads its body). */
export async function errorOf(res: Response): Promise<ApiError> {
  let body: ErrorBody = { code: 'internal_error', message: `HTTP ${res.status}` };
  try {
    const parsed = (await res.json()) as { error?: ErrorBody };
    if (parsed?.error && typeof parsed.error.code === 'string') body = parsed.error;
  } catch {
    /* not the API's envelope: keep the status */
  }
  return apiError(
    res.status,
    body,
    retryAfterMs(res.headers.get('retry-after')),
    res.headers.get('x-request-id') ?? undefined,
  );
}
