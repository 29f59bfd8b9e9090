import type { z } from 'zod';

/**
 * Typed errors with a stable `code`. The error handler turns an AppError into
 * `{"error": {"code", "message", "details"?}}` with its status; anything else is a 500 whose internals stay in the log.
 */
export class AppError extends Error {
  constructor(
    readonly statusCode: number,
    readonly code: string,
    message: string,
    readonly details?: unknown,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = 'AppError';
  }
}

export const badRequest = (message: string, details?: unknown) =>
  new AppError(400, 'invalid_request', message, details);

export const notFound = (what = 'session') =>
  new AppError(404, `${what}_not_found`, `No ${what.replace(/_/g, ' ')} with this id.`);

export const conflict = (code: string, message: string, details?: unknown) =>
  new AppError(409, code, message, details);

export const revisionMismatch = (current: number) =>
  new AppError(412, 'revision_mismatch', `The session is at revision ${current}.`, { revision: current });

export const storeUnavailable = () =>
  new AppError(503, 'store_unavailable', 'The session store is unavailable; try again shortly.', undefined, {
    'retry-after': '2',
  });

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
