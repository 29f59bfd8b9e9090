import { Redis } from 'ioredis';
import { untilKeyspace } from './keyspace-wait.js';
import type { Api, ApiResponse } from './service.js';
import type { DayUsage } from '../../src/cost/spend.js';

/** `GET /v1/usage`'s answer. */
export interface UsageBody {
  object: 'usage';
  from: string;
  to: string;
  cost_usd: number;
  /** One UTC day of the tenant each. */
  data: DayUsage[];
}

/**
 * `GET path` (a `/v1/usage` read) as `api`, once `counted` holds of its answer (a 200): a committed turn reaches its
 * tenant's day only after the commit that shows it (src/engine/commit.ts `billed`: the day is another hash tag than
 * the session's, and its record is batched over a turn of the event loop, src/cost/spend.ts), so a client that saw a
 * session end — its status, its `usage` — may read the day before the turn is in it. Read again at each write of a
 * tenant's day on the test's private redis-server at `redisUrl` (a keyspace notification: record-2.lua's EXPIRE
 * after its HINCRBYs), for at most `timeoutMs`; fails with the last answer.
 */
export async function usageOnceCounted(
  redisUrl: string,
  api: Api,
  path: string,
  counted: (u: UsageBody) => boolean,
  timeoutMs = 20_000,
): Promise<ApiResponse<UsageBody>> {
  const r = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  let last: ApiResponse<UsageBody> | undefined;
  try {
    await untilKeyspace(
      redisUrl,
      r,
      'q:*:usage:*',
      async () => {
        last = await api.get<UsageBody>(path);
        return last.status === 200 && counted(last.body)
          ? null
          : `not counted: ${last.status} ${JSON.stringify(last.body)}`;
      },
      timeoutMs,
    );
  } finally {
    r.disconnect();
  }
  return last!;
}
