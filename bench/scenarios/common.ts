import type { Ctx } from '../lib/context.js';
import { follow, pollUntilIdle, untilRunEnds, type Envelope } from '../lib/ws.js';
import { httpOk, nowMs } from '../lib/util.js';

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
    onEvent: (ev, at) => {
      const done = until(ev, at);
      if (done) end = at;
      return done;
    },
  });
  return end;
}

/** Creates a session that starts at once and follows it until its run ends: the client's whole wait. */
export async function createAndFollow(
  ctx: Ctx,
  base: string,
  body: Record<string, unknown>,
  timeoutMs: number,
) {
  const t0 = nowMs();
  const created = await httpOk('POST', `${base}/v1/sessions`, body);
  const t1 = await followRunEnd(ctx, base, created.id, timeoutMs);
  return { id: created.id as string, t0, t1, wall: t1 - t0 };
}

export type Verdict = 'PASS' | 'MISS' | 'n/a';

export const verdict = (ok: boolean | null): Verdict => (ok === null ? 'n/a' : ok ? 'PASS' : 'MISS');
