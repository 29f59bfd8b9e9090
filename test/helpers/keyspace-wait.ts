import { Redis } from 'ioredis';

/**
 * Waits on a private, test-only redis-server until `check` says done (null), reading again after each keyspace
 * notification of a key matching `pattern` (of the classes `classes`: by default the generic, expired and sorted-set
 * ones, `Kgxz`; turned on for the wait and set back after), and fails after `timeoutMs` with `check`'s last answer.
 * Subscribed before the first read, so a change between a read and the wait for the next notification is not missed:
 * its notification wakes the wait. Two waits on one Redis at once would set the classes back under each other: wait
 * one after the other.
 */
export async function untilKeyspace(
  url: string,
  r: Redis,
  pattern: string,
  /** null once done, else what is still awaited (for the failure's message). */
  check: () => Promise<string | null>,
  timeoutMs: number,
  /** The keyspace classes notified (notify-keyspace-events flags, with `K`): `K$` for a string's INCRBY, say. */
  classes = 'Kgxz',
): Promise<void> {
  const sub = new Redis(url, { maxRetriesPerRequest: 1, lazyConnect: true });
  sub.on('error', () => {});
  const [, previous = ''] = (await r.config('GET', 'notify-keyspace-events')) as string[];
  /** A notification came since the last read began. */
  let notified: boolean;
  let wake: (() => void) | null = null;
  sub.on('pmessage', () => {
    notified = true;
    wake?.();
  });
  try {
    await r.config('SET', 'notify-keyspace-events', `${previous}${classes}`);
    await sub.connect();
    await sub.psubscribe(`__keyspace@*__:${pattern}`);
    const until = Date.now() + timeoutMs;
    for (;;) {
      notified = false;
      const awaited = await check();
      if (awaited === null) return;
      const left = until - Date.now();
      if (left <= 0) throw new Error(`still ${awaited} after ${timeoutMs} ms`);
      if (notified) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = null;
    }
  } finally {
    sub.disconnect();
    await r.config('SET', 'notify-keyspace-events', previous);
  }
}
