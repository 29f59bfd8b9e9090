import { APIError, APIUserAbortError, AnthropicError } from '@anthropic-ai/sdk';
import type { SessionError } from '../store/session-state.js';
import type { RunHandle } from './run-handle.js';

/** The turn was aborted on purpose (cancel, interrupt, shutdown, lost lease, delete), not by a failure. */
export function isAbort(err: unknown, run: RunHandle): boolean {
  return err instanceof APIUserAbortError || (run.controller.signal.aborted && run.reason !== null);
}

/** The connection to the upstream broke after the turn's stream started (the SDK retries only before it starts). */
export function isStreamCut(err: unknown): boolean {
  if (err instanceof APIError) return false;
  const msg = err instanceof Error ? err.message : String(err);
  return /stream ended|terminated|socket|ECONNRESET|premature|before message_stop|other side closed/i.test(
    msg,
  );
}

/** Maps an upstream failure (after the SDK's own retries) to the session's error. */
export function upstreamError(err: unknown): SessionError {
  if (err instanceof APIError) {
    const status = err.status ?? 0;
    const message = err.message.slice(0, 1000);
    if (status === 429) return { code: 'upstream_rate_limited', message, retryable: true };
    if (status === 529) return { code: 'upstream_overloaded', message, retryable: true };
    if (status === 401 || status === 403) return { code: 'upstream_auth_failed', message, retryable: false };
    if (status === 400 || status === 404 || status === 413 || status === 422)
      return { code: 'upstream_invalid_request', message, retryable: false };
    if (/overloaded/i.test(message)) return { code: 'upstream_overloaded', message, retryable: true };
    return { code: 'upstream_error', message, retryable: true };
  }
  if (err instanceof AnthropicError || isStreamCut(err)) {
    return {
      code: 'upstream_error',
      message: err instanceof Error ? err.message : String(err),
      retryable: true,
    };
  }
  return { code: 'internal_error', message: 'The run failed unexpectedly.', retryable: true };
}
