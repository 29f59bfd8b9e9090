import type { Ctx } from '../lib/context.js';
import { follow, pollUntilIdle, untilRunEnds, type Envelope } from '../lib/ws.js';
import { http, nowMs, sleep } from '../lib/util.js';

/** Follows a session (WebSocket, or polling when the route is missing) until the run going on now ends. */
export async function followRunEnd(
  ctx: Ctx,
  base: string,
  id: string,
  timeoutMs: number,
  onEach?: (ev: Envelope, at: number) => void,
): Promise<number> {
  if (ctx.follow === 'poll') return pollUntilIdle(base, id, timeoutMs);
  let end = 0;
  const until = untilRunEnds(onEach);
  await follow(base, id, {
    timeoutMs,
    // Without `onEach`, only the status events matter (see untilRunEnds).
    ...(onEach ? {} : { types: ['session.status'] }),
    onEvent: (ev, at) => {
      const done = until(ev, at);
      if (done) end = at;
      return done;
    },
  });
  return end;
}

/** Counts what a well-behaved client had to retry. */
export interface RetryCount {
  /** 503 (`store_unavailable`) or 429 answers, retried after their Retry-After. */
  unavailable: number;
  /** Connection errors, retried after a short pause. */
  network: number;
}

/**
 * POST as a well-behaved client: a 503 or 429 is retried after its Retry-After (capped at 2 s), a connection error
 * after 200 ms, at most 5 times; each retry is counted. Without `retries`, nothing is retried.
 */
export async function postWithRetry(url: string, body: unknown, retries?: RetryCount): Promise<any> {
  for (let attempt = 1; ; attempt++) {
    let res;
    try {
      res = await http('POST', url, body);
    } catch (err) {
      if (attempt >= 5 || !retries) throw err;
      retries.network++;
      await sleep(200);
      continue;
    }
    if ((res.status === 503 || res.status === 429) && retries && attempt < 5) {
      retries.unavailable++;
      await sleep(Math.min(2000, Number(res.headers['retry-after'] ?? 1) * 1000));
      continue;
    }
    if (res.status < 200 || res.status >= 300) {
      throw new Error(`POST ${url} answered ${res.status}: ${JSON.stringify(res.body).slice(0, 300)}`);
    }
    return res.body;
  }
}

/** Creates a session that starts at once and follows it until its run ends: the client's whole wait. */
export async function createAndFollow(
  ctx: Ctx,
  base: string,
  body: Record<string, unknown>,
  timeoutMs: number,
  retries?: RetryCount,
) {
  const t0 = nowMs();
  const created = await postWithRetry(`${base}/v1/sessions`, body, retries);
  const t1 = await followRunEnd(ctx, base, created.id, timeoutMs);
  return { id: created.id as string, t0, t1, wall: t1 - t0 };
}

export type Verdict = 'PASS' | 'MISS' | 'n/a';

export const verdict = (ok: boolean | null): Verdict => (ok === null ? 'n/a' : ok ? 'PASS' : 'MISS');
