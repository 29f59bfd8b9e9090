/**
 * Redis's clock as this process reckons it: Date.now() plus the offset last observed between the two. The due
 * reads the sweeps make anyway (the action deadlines' `due-read-1.lua`, the scheduler's `due-1.lua`: every replica,
 * every second or so) answer Redis's `TIME`, and each one sets the offset again; the process takes one `TIME` at
 * boot so that it is right before the first sweep. So the times a replica decides or stores without a script of its
 * own (an action's `expires_at` and its 409 `action_timed_out`, a schedule's first `next_run_at`) are of the clock
 * the sweeps compare them with, whatever this host's clock says, at no round trip of their own.
 *
 * Error: half the round trip of the last due read (its TIME is taken somewhere between send and answer), plus how
 * far this host's clock moved since (a step of NTP is seen at the next read).
 */
import type { RedisClient } from '../store/lua-commands.js';

export class RedisClock {
  /** Redis's clock less this process's (ms), as last observed. */
  private offset = 0;

  /** Redis's now (ms), as of the last observation. */
  now(): number {
    return Date.now() + this.offset;
  }

  /**
   * A reply carrying Redis's now (`redisNowMs`), received just now; `sentAtMs`: Date.now() when its command was
   * sent (the TIME is then taken as half-way).
   */
  observe(redisNowMs: number, sentAtMs?: number): void {
    if (!Number.isFinite(redisNowMs)) return;
    const received = Date.now();
    const local = sentAtMs === undefined || sentAtMs > received ? received : (sentAtMs + received) / 2;
    this.offset = Math.round(redisNowMs - local);
  }

  /** One `TIME` (at boot): the offset before the first sweep observes it. */
  async sync(redis: RedisClient): Promise<void> {
    const sent = Date.now();
    const [s, us] = await redis.time();
    this.observe(Number(s) * 1000 + Math.floor(Number(us) / 1000), sent);
  }
}
