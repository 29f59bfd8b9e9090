import { ConnectionError, retryAfterMs } from './errors.js';

/**
 * The fetch every REST call goes through: retries answers that say "try again" and requests that never reached the
 * service, safely.
 *
 * - 429 (`rate_limited`, `quota_exceeded`) and 503 (`store_unavailable`) are retried after `Retry-After` (or a
 *   backoff when absent), at most `maxRetries` times, and not when the service asks to wait longer than
 *   `maxRetryDelayMs`: the answer is then returned as is (and becomes a RetryableError carrying `retryAfterMs`).
 * - A request that failed before any answer (connection refused or reset) is retried with a backoff, except PATCH
 *   (applying it twice is not always the same as once).
 * - Every POST carries an `Idempotency-Key` (a random one unless the caller gave one), the same on every attempt:
 *   the service answers a repeated POST with the first answer, so a POST whose answer was lost runs once.
 */
export interface RetryOptions {
  /** Attempts after the first (default 3). */
  maxRetries?: number;
  /** The longest wait the client accepts between attempts (default 60 s, a rate-limit window). */
  maxRetryDelayMs?: number;
  /** First backoff when the service gave no Retry-After (default 200 ms; doubles, with jitter, up to 5 s). */
  baseDelayMs?: number;
  /**
   * A GET whose answer (headers and body) has not come after this long is given up with a ConnectionError and not
   * retried, so a caller that polls reads again instead of waiting behind a stalled connection (default: no limit).
   */
  readTimeoutMs?: number;
}

export type FetchLike = (input: Request) => Promise<Response>;

const RETRY_STATUSES = new Set([429, 503]);

/** A random id for `Idempotency-Key` (getRandomValues: present in Node ≥ 18 and in browsers, even over http). */
export function idempotencyKey(): string {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  return `idem_${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

export function backoffMs(attempt: number, baseMs: number): number {
  const cap = Math.min(5000, baseMs * 2 ** attempt);
  return cap / 2 + Math.random() * (cap / 2);
}

/** Resolves after `ms`, or rejects with the signal's reason once it aborts. */
export function sleep(ms: number, signal?: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export function retryingFetch(fetchImpl: FetchLike, opts: RetryOptions = {}): FetchLike {
  const retrying = retryLoop(fetchImpl, opts);
  const readTimeoutMs = opts.readTimeoutMs;
  if (readTimeoutMs === undefined) return retrying;
  return async (input) => {
    if (input.method !== 'GET') return retrying(input);
    // The timeout rides on the request's signal and the body is read within it: a body that stalls after the
    // headers came is given up as well. (A GET's answer is a JSON document: buffering it costs nothing.)
    const timeout = AbortSignal.timeout(readTimeoutMs);
    const req = new Request(input, { signal: AbortSignal.any([input.signal, timeout]) });
    try {
      const res = await retrying(req);
      const body = await res.arrayBuffer();
      return new Response(res.status === 204 || res.status === 304 ? null : body, res);
    } catch (err) {
      if (!timeout.aborted || input.signal.aborted) throw err;
      throw new ConnectionError(`GET ${input.url}: no answer in ${readTimeoutMs} ms`, { cause: err });
    }
  };
}

function retryLoop(fetchImpl: FetchLike, opts: RetryOptions): FetchLike {
  const maxRetries = opts.maxRetries ?? 3;
  const maxDelay = opts.maxRetryDelayMs ?? 60_000;
  const base = opts.baseDelayMs ?? 200;
  return async (input) => {
    let req = input;
    if (req.method === 'POST' && !req.headers.has('idempotency-key')) {
      const headers = new Headers(req.headers);
      headers.set('idempotency-key', idempotencyKey());
      req = new Request(req, { headers });
    }
    for (let attempt = 0; ; attempt++) {
      // A Request's body can be read once: each attempt sends a copy.
      let res: Response;
      try {
        res = await fetchImpl(req.clone());
      } catch (err) {
        if (req.signal.aborted) throw err;
        if (attempt >= maxRetries || req.method === 'PATCH') {
          throw new ConnectionError(`${req.method} ${req.url} failed: ${String(err)}`, { cause: err });
        }
        await sleep(backoffMs(attempt, base), req.signal);
        continue;
      }
      if (!RETRY_STATUSES.has(res.status) || attempt >= maxRetries) return res;
      const wait = retryAfterMs(res.headers.get('retry-after')) ?? backoffMs(attempt, base);
      if (wait > maxDelay) return res;
      await res.body?.cancel();
      await sleep(wait, req.signal);
    }
  };
}
