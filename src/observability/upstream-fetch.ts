/**
 * Every HTTP attempt the SDK makes to the Messages API, seen where it happens: its own `fetch` option. The SDK
 * retries inside one call (429, 5xx, connection errors), so the engine only ever sees the last attempt; here each
 * attempt is counted (`trs_upstream_requests_total` by status class and error type, `trs_upstream_retries_total`
 * from the SDK's own `X-Stainless-Retry-Count` header) and each failed one is logged with the session and tenant of
 * the run that made it (an AsyncLocalStorage the run enters), the upstream's `request-id` and the attempt number.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { FastifyBaseLogger } from 'fastify';
import { APIError, AnthropicError } from '@anthropic-ai/sdk';
import { isStreamCut } from '../engine/upstream.js';
import type { Metrics } from './metrics.js';

/** The run a request belongs to; `tenant` is known once the run has read its session. */
export interface UpstreamContext {
  session: string;
  tenant: string | null;
  /** The turn in flight (set by the turn, src/engine/turn-runner.ts): the model request's iteration and model. */
  iteration?: number | undefined;
  model?: string | undefined;
  /** Whether the run aborted its request itself (cancel, interrupt, shutdown, lost lease); else an abort is the SDK's timeout. */
  ownAbort?: () => boolean;
  /**
   * The stream relay of the turn in flight (src/engine/stream-relay.ts `gate`): a promise the upstream body's reader
   * waits on before its next read while the relay is behind, else null. Set by the turn, cleared after it.
   */
  gate?: (() => Promise<void> | null) | undefined;
}

export const upstreamContext = new AsyncLocalStorage<UpstreamContext>();

/** The Messages API's error types by status (what the API names in `error.type`), so no body is read for it. */
function errorType(status: number): string {
  if (status < 400) return 'none';
  const known: Record<number, string> = {
    400: 'invalid_request_error',
    401: 'authentication_error',
    403: 'permission_error',
    404: 'not_found_error',
    408: 'timeout_error',
    413: 'request_too_large',
    429: 'rate_limit_error',
    529: 'overloaded_error',
  };
  return known[status] ?? (status >= 500 ? 'api_error' : `http_${status}`);
}

function headerOf(init: RequestInit | undefined, name: string): string | null {
  const h = init?.headers;
  if (!h) return null;
  if (h instanceof Headers) return h.get(name);
  if (Array.isArray(h)) return h.find(([k]) => k.toLowerCase() === name)?.[1] ?? null;
  const record = h as Record<string, string | undefined>;
  for (const key of Object.keys(record)) if (key.toLowerCase() === name) return record[key] ?? null;
  return null;
}

export function countingFetch(
  metrics: Metrics,
  log: FastifyBaseLogger,
  inner: typeof fetch = fetch,
): typeof fetch {
  return async (input, init) => {
    const attempt = Number(headerOf(init, 'x-stainless-retry-count') ?? 0);
    if (attempt > 0) metrics.upstreamRetries.inc();
    const ctx = upstreamContext.getStore();
    try {
      const res = await inner(input, init);
      const type = errorType(res.status);
      metrics.upstreamRequests.inc({ status_class: `${Math.floor(res.status / 100)}xx`, error_type: type });
      if (res.status >= 400)
        log.warn(
          {
            ...turnOf(ctx),
            status: res.status,
            error_type: type,
            attempt,
            upstream_request_id: res.headers.get('request-id'),
          },
          'upstream request failed',
        );
      return res;
    } catch (err) {
      // The SDK aborts an attempt of its own accord only at its timeout; the run's aborts reach it through its signal.
      const aborted = init?.signal?.aborted === true;
      const own = aborted && (ctx?.ownAbort?.() ?? true);
      const type = own ? 'aborted' : aborted ? 'timeout' : 'connection_error';
      metrics.upstreamRequests.inc({ status_class: 'none', error_type: type });
      if (!own) log.warn({ ...turnOf(ctx), error_type: type, err, attempt }, 'upstream request failed');
      throw err;
    }
  };
}

/** The fields of a line about an upstream request: the run's session and tenant, the turn's iteration and model. */
function turnOf(ctx: UpstreamContext | undefined) {
  return {
    session: ctx?.session ?? null,
    tenant: ctx?.tenant ?? null,
    iteration: ctx?.iteration ?? null,
    model: ctx?.model ?? null,
  };
}

/**
 * The error type of a failure of the upstream's answer after its headers (the fetch above counted a 2xx): an error
 * event in the stream (its `error.type`: `overloaded_error`, …), or the body cut, stalled or malformed
 * (`stream_error`); null for what is no upstream failure (an abort of the run's own, a bug of ours).
 */
export function upstreamFailureType(err: unknown): string | null {
  if (err instanceof APIError) {
    const type = (err.error as { error?: { type?: unknown } } | undefined)?.error?.type;
    return typeof type === 'string' ? type : 'api_error';
  }
  return err instanceof AnthropicError || isStreamCut(err) ? 'stream_error' : null;
}

/**
 * A model request whose answer failed after its headers: counted (`trs_upstream_stream_errors_total`; with
 * `resent`, the engine's own retry of the turn in `trs_upstream_retries_total` too) and logged with its turn on the
 * run's logger (`log`: it carries the session and tenant).
 */
export function upstreamStreamFailed(
  metrics: Metrics,
  log: FastifyBaseLogger,
  ctx: UpstreamContext,
  err: unknown,
  resent: number | null,
): void {
  const type = upstreamFailureType(err) ?? 'stream_error';
  metrics.upstreamStreamErrors.inc({ error_type: type });
  if (resent !== null) metrics.upstreamRetries.inc();
  // The run's logger names the session and tenant already.
  const { iteration, model } = turnOf(ctx);
  const line = {
    iteration,
    model,
    error_type: type,
    upstream_request_id: err instanceof APIError ? (err.requestID ?? null) : null,
    err,
  };
  if (resent !== null) log.warn({ ...line, attempt: resent }, 'stream cut mid-turn; sending the turn again');
  else log.warn(line, 'upstream stream failed');
}
