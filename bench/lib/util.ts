/** Small helpers shared by the benchmark scripts: timing, statistics, JSON over HTTP. */
import nodeHttp from 'node:http';

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Wall-clock milliseconds with sub-millisecond precision (comparable with `Date.now()` of other processes). */
export const nowMs = () => performance.timeOrigin + performance.now();

/** The p-th percentile (0..100) with linear interpolation; NaN for an empty list. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

export const median = (values: readonly number[]) => percentile(values, 50);

export function mean(values: readonly number[]): number {
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : NaN;
}

/** Runs `fn` over `items` with at most `limit` in flight. */
export async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<R>) {
  const out = new Array<R>(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  });
  await Promise.all(workers);
  return out;
}

/** Rejects with `what` after `ms`, so no wait of the benchmark is unbounded. */
export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

export interface JsonResponse {
  status: number;
  body: any;
  headers: nodeHttp.IncomingHttpHeaders;
}

/**
 * The bench's REST client: keep-alive connections, at most 64 to a server at once (requests beyond wait for one),
 * as a client library or a load balancer would pool them; 1,000 sessions created at once do not become 1,000
 * simultaneous TCP handshakes.
 */
const agent = new nodeHttp.Agent({ keepAlive: true, maxSockets: 64 });

/** JSON request on loopback; throws on a network error or an idle socket for `timeoutMs`, returns any status. */
export function http(method: string, url: string, body?: unknown, timeoutMs = 30_000): Promise<JsonResponse> {
  return new Promise((resolve, reject) => {
    const data = body !== undefined ? Buffer.from(JSON.stringify(body)) : undefined;
    const req = nodeHttp.request(
      url,
      {
        method,
        agent,
        timeout: timeoutMs,
        headers: data ? { 'content-type': 'application/json', 'content-length': data.length } : {},
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: any = text;
          try {
            parsed = text ? JSON.parse(text) : null;
          } catch {
            /* not JSON */
          }
          resolve({ status: res.statusCode ?? 0, body: parsed, headers: res.headers });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`timed out after ${timeoutMs} ms: ${method} ${url}`)));
    req.on('error', reject);
    req.end(data);
  });
}

/** Like `http`, but throws unless the status is 2xx. */
export async function httpOk(method: string, url: string, body?: unknown, timeoutMs?: number) {
  const res = await http(method, url, body, timeoutMs);
  if (res.status < 200 || res.status >= 300) {
    throw new Error(`${method} ${url} answered ${res.status}: ${JSON.stringify(res.body).slice(0, 500)}`);
  }
  return res.body;
}

export const fmt = (n: number, digits = 1) =>
  Number.isFinite(n)
    ? n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 })
    : 'n/a';

export const mb = (bytes: number) => bytes / (1024 * 1024);

/**
 * Lateness (ms) of a text delta of the fake's `paced` script from the fake's schedule: delta k is written
 * (k + 4) × delay after the reply was built, whose time delta 0 carries (`#0 s<ms> …`). `starts` keeps that time
 * per reader; undefined for other text.
 */
export function pacedLateness(text: string, at: number, delay: number, state: { start: number }) {
  const m = /^#(\d+) (?:s(\d+))?/.exec(text);
  if (!m) return undefined;
  if (m[2] !== undefined) state.start = Number(m[2]);
  return at - (state.start + (Number(m[1]) + 4) * delay);
}
