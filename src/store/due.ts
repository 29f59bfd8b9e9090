/**
 * Due sets: global sorted sets of session ids scored by the time (ms) something is due for them, swept by any
 * replica (as `runs:due` is): `actions:due` (the deadline of the action a `requires_action` session waits for:
 * src/sessions/deadlines.ts) and `sessions:expiry` (retention: src/sessions/retention.ts). An entry may be early —
 * the sweeper reads the session and moves the entry to the true time — but never late or missing: it is written
 * before the session write that makes it due. Moves and drops are guarded by the score read (due-settle-1.lua).
 * Scores are of Redis's clock: both sets are read by its now (due-read-1.lua), and written with it, or with the
 * store's reckoning of it (src/redis/clock.ts).
 */
import type { RedisClient } from './lua-commands.js';

export const ACTIONS_DUE_KEY = 'actions:due';
export const EXPIRY_DUE_KEY = 'sessions:expiry';

export interface DueEntry {
  id: string;
  /** The score as read (a string: given back as is to `settle`). */
  score: string;
  at: number;
}

/** The entries of a ZRANGEBYSCORE … WITHSCORES reply. */
function entries(rows: string[]): DueEntry[] {
  const out: DueEntry[] = [];
  for (let i = 0; i + 1 < rows.length; i += 2)
    out.push({ id: rows[i]!, score: rows[i + 1]!, at: Number(rows[i + 1]) });
  return out;
}

export class DueSet {
  constructor(
    private readonly redis: RedisClient,
    readonly key: string,
  ) {}

  /**
   * Registers `id` as due at `at` (an earlier entry is kept: the sweeper moves it on). The entry's score changes
   * whatever it was (due-add-1.lua), so a sweep that read the entry before this and settles it after finds the score
   * moved and leaves it: the write this comes before is never swept away as the old state it replaced.
   */
  async add(id: string, at: number): Promise<void> {
    await this.redis.sessDueAdd(this.key, id, at);
  }

  /**
   * As `add`, due `inMs` from now of Redis's clock (due-add-1.lua takes TIME: one EVALSHA, as `add`), the clock the
   * sweep reads by (`dueNow`): a replica's own clock, ahead, wrote an entry late by its skew.
   */
  async addIn(id: string, inMs: number): Promise<void> {
    await this.redis.sessDueAdd(this.key, id, inMs, 'in');
  }

  /** Entries due by Redis's now, oldest first, and that now (due-read-1.lua). */
  async dueNow(limit: number): Promise<{ now: number; entries: DueEntry[] }> {
    const [now, ...rows] = await this.redis.sessDueRead(this.key, limit);
    return { now: Number(now), entries: entries(rows) };
  }

  /** Moves the entry to `next` (null: drops it) if it still has the score read. */
  async settle(e: DueEntry, next: number | null): Promise<boolean> {
    return (await this.redis.sessDueSettle(this.key, e.id, e.score, next === null ? '' : String(next))) === 1;
  }
}
