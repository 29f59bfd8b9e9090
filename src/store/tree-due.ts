/**
 * When the agents' sweep (src/agents/sweep.ts) looks at each member of a sub-agent tree (parents with `agent` tools,
 * and children): one sorted set per tenant (`{agents}:due:<tenant>`, member → ms) and an index of the tenants by
 * their earliest entry (`{agents}:tenants`), and each member's tenant (`{agents}:tenant-of`, so that a member whose
 * session is gone can still be woken: RunQueue.end), kept together by tree-due-3.lua and tree-due-settle-3.lua (one
 * hash tag: one slot, as the single set before them). A pass takes every due tenant's entries round robin, so a burst
 * of one tenant's tree ends (thousands of children at once) holds another tenant's tree back by one pass, not by the
 * burst.
 *
 * Due times are of Redis's clock: written `in` ms from its now (tree-due-3.lua, tree-due-settle-3.lua take TIME) and
 * read by it (tree-due-read-1.lua, whose now the pass reads the tenants' sets by and gives the store's clock). With
 * the replicas' clocks, a replica ahead looked at every tenant's members early (a parked parent at every pass, not a
 * minute after) and wrote its wake-ups late (a child's end told to its parent only after the skew); one behind the
 * other way round.
 *
 * Before, every member was in one set, `agents:due`, oldest first across tenants. A replica of that version (in a
 * rolling upgrade) may still write there, and members written then are still there: a pass also takes that set's
 * due members (as one more tenant's), and the sweep's look moves each into its tenant's set.
 */
import type { RedisClient } from './lua-commands.js';
import type { RedisClock } from '../redis/clock.js';

/** The one set of every tenant's members, as written before the per-tenant sets (read, then emptied, by passes). */
export const LEGACY_AGENTS_DUE_KEY = 'agents:due';
const TENANTS_KEY = '{agents}:tenants';
/**
 * Each member's tenant (hash), while it is a member. Members written by the version before (tree-due-2.lua) have
 * theirs from their next write (a wake-up, a look).
 */
const TENANT_OF_KEY = '{agents}:tenant-of';
/** A tenant's due set. */
export const treeDueKey = (tenant: string) => `{agents}:due:${tenant}`;

/** A member due for a look. */
export interface TreeEntry {
  id: string;
  /** Its tenant; null for a member of the old single set (the look reads the session, and so its tenant). */
  tenant: string | null;
  /** The score as read (a string: given back as is to `settle`). */
  score: string;
}

/** `ZRANGEBYSCORE … WITHSCORES` rows as entries of `tenant`. */
function entries(rows: string[], tenant: string | null): TreeEntry[] {
  const out: TreeEntry[] = [];
  for (let j = 0; j + 1 < rows.length; j += 2) out.push({ id: rows[j]!, tenant, score: rows[j + 1]! });
  return out;
}

/** Up to `limit` entries: the first of each list in turn, then the second of each, … */
function roundRobin(lists: TreeEntry[][], limit: number): TreeEntry[] {
  const out: TreeEntry[] = [];
  const longest = Math.max(0, ...lists.map((l) => l.length));
  for (let round = 0; round < longest && out.length < limit; round++)
    for (const l of lists) if (round < l.length && out.length < limit) out.push(l[round]!);
  return out;
}

/** How far before Redis's now a wake-up in the old set is scored (ms): see TreeDue.oldWakeScore. */
const OLD_WAKE_LEAD_MS = 1000;

export class TreeDue {
  /**
   * Whether the old set held members at this process's last pass (true until a pass tells): a wake-up then goes there
   * too, for a member a replica of the last version wrote that no look has moved yet (a root idle since the upgrade,
   * say, whose new run calls an agent). Once the old set is empty, nothing: no command more per run end.
   */
  private oldSetLeft = true;

  constructor(
    private readonly redis: RedisClient,
    /** Redis's clock as this process reckons it (the store's): the old set's scores, and what the reads observe. */
    private readonly clock: RedisClock,
  ) {}

  /**
   * The score of a wake-up in the old set (which older replicas read by their own clocks, this version by Redis's in
   * whole ms: due-read-1.lua): OLD_WAKE_LEAD_MS before Redis's now as this process reckons it, so that it is due at
   * once for a reader whose clock (or reckoning, a ms or so off) is behind by less than that, with a fraction, so
   * that it differs from the score a look that is under way read and that look leaves it (`settle`).
   */
  private oldWakeScore(): string {
    return String(this.clock.now() - OLD_WAKE_LEAD_MS + Math.random() * 0.999);
  }

  /**
   * Makes the session a member of its tenant's due set, first looked at a minute from now of Redis's clock (set,
   * whatever it was): a safety net, as its runs' ends wake it sooner.
   */
  async watch(id: string, tenant: string): Promise<void> {
    await this.redis.sessTreeDue(treeDueKey(tenant), TENANTS_KEY, TENANT_OF_KEY, id, 60_000, tenant, '');
  }

  /**
   * A member looked at now of Redis's clock (its run ended, a child of it was deleted, …). Not for sessions that are
   * not members.
   */
  async wake(id: string, tenant: string): Promise<void> {
    await Promise.all([
      this.redis.sessTreeDue(treeDueKey(tenant), TENANTS_KEY, TENANT_OF_KEY, id, 0, tenant, 'XX'),
      this.oldSetLeft ? this.redis.zadd(LEGACY_AGENTS_DUE_KEY, 'XX', this.oldWakeScore(), id) : null,
    ]);
  }

  /**
   * A member looked at within `inMs` of Redis's now, unless it is due sooner (nothing then: a wake-up is never put
   * off). Written before a write that gives the sweep something to do with no run of the member's to end and wake
   * it (src/sessions/mutate.ts `Plan.spawns`), whose own `wake` follows it: should the process die between the two,
   * any replica's sweep looks after `inMs`. Not at once: a look before the write lands would find nothing to do and
   * move the member on (an hour away), and a process that dies then leaves no wake-up at all.
   */
  async soon(id: string, tenant: string, inMs: number): Promise<void> {
    await this.redis.sessTreeDue(treeDueKey(tenant), TENANTS_KEY, TENANT_OF_KEY, id, inMs, tenant, 'LT');
  }

  /**
   * The tenant of a member whose session is gone (so whose meta no longer tells it), as the tree's own writes keep
   * it; null for a session that is no member (or one of the old set, or written by the version before and not
   * written since: see `wakeOld`).
   */
  tenantOf(id: string): Promise<string | null> {
    return this.redis.hget(TENANT_OF_KEY, id);
  }

  /**
   * A wake-up for a member of the old set whose tenant is not known (its session gone), as that version wrote it
   * (ZADD XX: nothing for a session that is no member there).
   */
  async wakeOld(id: string): Promise<void> {
    await this.redis.zadd(LEGACY_AGENTS_DUE_KEY, 'XX', this.oldWakeScore(), id);
  }

  /**
   * Up to `limit` members due by Redis's now: one of each tenant's in turn (the old set first, then the tenants with
   * the earliest entries), so a burst of one tenant's members takes only what the others leave. Whenever `limit`
   * members are due, `limit` are given. Two round trips: the index (tree-due-read-1.lua, answering Redis's now,
   * which the tenants' sets are read by and the store's clock observes) and the old set together (another slot: a
   * Cluster refuses a pipeline across nodes), then one pipeline of the tenants' sets.
   */
  async due(limit: number): Promise<TreeEntry[]> {
    const sent = Date.now();
    // The sample is timed by the script's own reply (which took the TIME), not by the old set's beside it.
    const index = this.redis.sessTreeDueRead(TENANTS_KEY, limit).then((r) => {
      this.clock.observe(Number(r[0]), sent);
      return r;
    });
    const [[now, ...tenants], [legacyRows, legacyLeft]] = await Promise.all([index, this.oldSet(limit)]);
    this.oldSetLeft = legacyLeft > 0;
    const lists = legacyRows.length > 0 ? [entries(legacyRows, null)] : [];
    // Each tenant the index gives has at least one entry due (its score there is its earliest entry), so among n
    // lists the round robin takes at most limit - (n - 1) of any one: read that many of each, and no tenant's
    // leftover is missed. At most about limit²/4 entries read (650 for 50: 25 tenants, 26 each).
    const read = Math.max(1, limit - (tenants.length + lists.length - 1));
    if (tenants.length > 0) {
      const p = this.redis.pipeline();
      for (const t of tenants) p.zrangebyscore(treeDueKey(t), '-inf', now, 'WITHSCORES', 'LIMIT', 0, read);
      for (const [i, [err, r]] of ((await p.exec()) ?? []).entries()) {
        if (err) throw err;
        lists.push(entries(r as string[], tenants[i]!));
      }
    }
    return roundRobin(lists, limit);
  }

  /**
   * The old set's members due by Redis's now (up to `limit`: due-read-1.lua), and how many it holds in all: one
   * round trip.
   */
  private async oldSet(limit: number): Promise<[string[], number]> {
    const res = await this.redis
      .pipeline()
      .sessDueRead(LEGACY_AGENTS_DUE_KEY, limit)
      .zcard(LEGACY_AGENTS_DUE_KEY)
      .exec();
    const [[rowsErr, read], [cardErr, card]] = res as [[Error | null, string[]], [Error | null, number]];
    if (rowsErr || cardErr) throw rowsErr ?? cardErr;
    return [read.slice(1), card];
  }

  /**
   * Moves the entry to `inMs` from Redis's now (null: drops it) only if its score is still the one read. An entry of
   * the old set moves into `tenant`'s set (not over an entry there: that one is newer), or stays in the old set (at
   * the store's reckoning of Redis's now + `inMs`) when the look could not tell its tenant.
   */
  async settle(e: TreeEntry, inMs: number | null, tenant?: string): Promise<void> {
    const next = inMs === null ? null : Math.max(0, inMs);
    const to = next === null ? '' : String(next);
    if (e.tenant !== null) {
      await this.redis.sessTreeDueSettle(
        treeDueKey(e.tenant),
        TENANTS_KEY,
        TENANT_OF_KEY,
        e.id,
        e.score,
        to,
        e.tenant,
      );
      return;
    }
    if (next !== null && tenant === undefined) {
      await this.redis.sessDueSettle(LEGACY_AGENTS_DUE_KEY, e.id, e.score, String(this.clock.now() + next));
      return;
    }
    // Moved before it is dropped: a crash between the two leaves it in both sets, and the next look moves it again.
    if (next !== null && tenant !== undefined)
      await this.redis.sessTreeDue(treeDueKey(tenant), TENANTS_KEY, TENANT_OF_KEY, e.id, next, tenant, 'NX');
    await this.redis.sessDueSettle(LEGACY_AGENTS_DUE_KEY, e.id, e.score, '');
  }
}
