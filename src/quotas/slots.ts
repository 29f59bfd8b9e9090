import { randomUUID } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { defineLuaCommands } from '../store/lua-commands.js';
import './lua/commands.js';

/**
 * Slots a tenant holds across replicas (open WebSockets): one ZSET per tenant in Redis, each slot with an expiry that
 * this replica renews every third of `ttlMs` while the slot is held, so slots of a replica that died lapse by
 * themselves. Acquire is one atomic script (lua/acquire-slot-1.lua: check and take); release is one ZREM.
 */
export class TenantSlots {
  private readonly replica = randomUUID();
  private seq = 0;
  /** key → members this replica holds. */
  private readonly held = new Map<string, Set<string>>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly redis: Redis | Cluster,
    private readonly name: string,
    private readonly ttlMs = 60_000,
  ) {
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'quota');
    this.timer = setInterval(() => void this.renew(), Math.ceil(ttlMs / 3));
    this.timer.unref();
  }

  /**
   * The tenant's ZSET, or with `within` the ZSET of one holder among the tenant's (a client token's, counted apart
   * from and besides the tenant's). Hash tag: the tenant, so a Redis Cluster keeps them in one slot.
   */
  private key(tenant: string, within?: string) {
    return within === undefined ? `q:{${tenant}}:${this.name}` : `q:{${tenant}}:${this.name}:${within}`;
  }

  /**
   * Takes a slot if fewer than `max` are held by the tenant (or by `within` of it) on all replicas; returns its
   * release, or null.
   */
  async acquire(tenant: string, max: number, within?: string): Promise<(() => void) | null> {
    const key = this.key(tenant, within);
    const member = `${this.replica}:${++this.seq}`;
    const now = Date.now();
    const ok = await this.redis.quotaAcquireSlot(key, now, now + this.ttlMs, max, member);
    if (ok !== 1) return null;
    let set = this.held.get(key);
    if (!set) this.held.set(key, (set = new Set()));
    set.add(member);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      set.delete(member);
      if (set.size === 0 && this.held.get(key) === set) this.held.delete(key);
      this.redis.zrem(key, member).catch(() => {
        /* Redis away: the slot lapses after ttlMs */
      });
    };
  }

  /** Pushes the expiry of every held slot (one ZADD XX per tenant: a Cluster pipeline needs one slot per command). */
  private async renew(): Promise<void> {
    const expiry = Date.now() + this.ttlMs;
    for (const [key, members] of this.held) {
      if (members.size === 0) continue;
      const args = [...members].flatMap((m) => [expiry, m]);
      await Promise.all([this.redis.zadd(key, 'XX', ...args), this.redis.pexpireat(key, expiry)]).catch(
        () => {},
      );
    }
  }

  /** Stops renewing and releases this replica's slots. */
  async close(): Promise<void> {
    clearInterval(this.timer);
    for (const [key, members] of this.held) {
      if (members.size) await this.redis.zrem(key, ...members).catch(() => {});
    }
    this.held.clear();
  }
}
