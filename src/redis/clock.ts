/**
 * Redis's clock as this process reckons it: Date.now() plus the offset last observed between the two. The due
 * reads the sweeps make anyway (the action deadlines' and retention's `due-read-1.lua`, the scheduler's `due-1.lua`,
 * the agents' `tree-due-read-1.lua`: every replica, every second or so) answer Redis's `TIME`, and each one sets the
 * offset again; the process takes one `TIME` at boot so that it is right before the first sweep. So the times a
 * replica decides or stores without a script of its own (an action's `expires_at` and its 409 `action_timed_out`, a
 * schedule's first `next_run_at`) are of the clock the sweeps compare them with, whatever this host's clock says,
 * at no round trip of their own.
 *
 * Error: half the round trip of the sample kept (its TIME is taken somewhere between send and answer), plus how
 * far this host's clock moved since. A sample is kept only when its round trip is within RTT_SLACK_MS of the one
 * kept, or that one is older than KEEP_MS: a reply slowed by a busy event loop or a slow Redis (up to the command
 * timeout) would else move the clock by half its delay until the next read. So an NTP step of this host is seen
 * within KEEP_MS at most. In a Redis Cluster the due sets may live on nodes whose clocks differ: the offset is of
 * whichever answered the sample kept.
 */
import type { RedisClient } from '../store/lua-commands.js';

/** How much longer than the kept sample's a new sample's round trip may be and still be kept (ms). */
const RTT_SLACK_MS = 20;
/** How long a sample is kept against samples of longer round trips (ms). */
const KEEP_MS = 30_000;

export class RedisClock {
  /** Redis's clock less this process's (ms), as last observed. */
  private offset = 0;
  /** The sample the offset is of: its round trip and when it was received (ms, this host's clock). */
  private kept: { rtt: number; at: number } | null = null;

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
    const sent = sentAtMs === undefined || sentAtMs > received ? received : sentAtMs;
    const rtt = received - sent;
    const k = this.kept;
    if (k && rtt > k.rtt + RTT_SLACK_MS && received - k.at >= 0 && received - k.at < KEEP_MS) return;
    this.offset = Math.round(redisNowMs - (sent + received) / 2);
    this.kept = { rtt, at: received };
  }

  /** One `TIME` (at boot): the offset before the first sweep observes it. */
  async sync(redis: RedisClient): Promise<void> {
    const sent = Date.now();
    const [s, us] = await redis.time();
    this.observe(Number(s) * 1000 + Math.floor(Number(us) / 1000), sent);
  }
}
