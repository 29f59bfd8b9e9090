import type { FastifyBaseLogger as Logger } from 'fastify';
import type { EventTap } from '../store/store.js';
import type { IndexEntry } from './keys.js';
import type { WebhookStore } from './store.js';

/**
 * How events get from the session store to the webhooks' outboxes without being lost and without a cost on the hot
 * path for tenants that have no webhooks.
 *
 * The store's scripts write events into the session's log (`s:{id}:e`); on a Redis Cluster they cannot also write
 * to an outbox (another slot). So the log itself is the source: a fan-out (fanout.ts) reads it from a cursor kept
 * in the session's slot and enqueues into the outboxes, and a *mark* in the global zset `wh:marks` says which
 * sessions may have events not yet fanned out.
 *
 * The store calls `tap` before each write of events, with the session's tenant where the writer knows it (a create,
 * a request of the tenant; a run learns it from its first write, by one read, and marks meanwhile). It answers from
 * memory:
 * - no webhook of any tenant listens for these types, or the session's tenant (when known) has none: undefined,
 *   nothing is done;
 * - else the process fans the session out as soon as the write landed (`landed`), and, unless it marked this
 *   session within the last `refreshMs`, it marks it now: one ZADD (score = now) sent before the event write, on
 *   the same connection (so Redis runs it first) or, on a Cluster, awaited (`ready`).
 *
 * A mark is dropped only by a sweep that started reading the log at least `graceMs` after the mark's score
 * (mark-done-1.lua), and every write covered by a mark was sent within `refreshMs` of it and has landed or failed
 * within the command timeout. So a replica SIGKILLed after its write and before its fan-out leaves a mark that
 * some replica sweeps after `graceMs`: no event is lost. `graceMs` must exceed `refreshMs` + the command timeout +
 * the clock skew between replicas.
 *
 * The interest (tenant → event types of its enabled webhooks) is loaded at start, reloaded per tenant when
 * `wh:changed` says so, and wholly when the subscriber reconnects and every `RELOAD_MS`.
 */

const RELOAD_MS = 30_000;
const SESSION_TENANTS_MAX = 50_000;

export class Interest {
  private byTenant = new Map<string, Map<string, IndexEntry>>();
  private types = new Set<string>();
  private typesOf = new Map<string, Set<string>>();

  constructor(private readonly store: WebhookStore) {}

  async loadAll(): Promise<void> {
    const tenants = await this.store.tenants();
    const next = new Map<string, Map<string, IndexEntry>>();
    await Promise.all(tenants.map(async (t) => next.set(t, await this.store.index(t))));
    this.byTenant = next;
    this.rebuild();
  }

  async loadTenant(tenant: string): Promise<void> {
    this.byTenant.set(tenant, await this.store.index(tenant));
    this.rebuild();
  }

  private rebuild(): void {
    this.types = new Set();
    this.typesOf = new Map();
    for (const [tenant, hooks] of this.byTenant) {
      const set = new Set<string>();
      for (const h of hooks.values()) if (!h.disabled) for (const t of h.events) set.add(t);
      if (set.size) this.typesOf.set(tenant, set);
      for (const t of set) this.types.add(t);
    }
  }

  /** Whether some tenant (or `tenant`, when known) has an enabled webhook for one of the types. */
  listens(types: readonly string[], tenant: string | undefined): boolean {
    const set = tenant === undefined ? this.types : this.typesOf.get(tenant);
    return !!set && types.some((t) => set.has(t));
  }

  /** The tenant's webhooks as last loaded. */
  webhooks(tenant: string): Map<string, IndexEntry> {
    return this.byTenant.get(tenant) ?? new Map();
  }
}

export interface TapOptions {
  store: WebhookStore;
  interest: Interest;
  isCluster: boolean;
  refreshMs: number;
  log: Logger;
  /** Fans the session out now (the write landed). */
  kick: (sessionId: string) => void;
}

/** The store's EventTap for webhooks (see the comment at the top of this file). */
export function createTap(opts: TapOptions): {
  tap: EventTap;
  remember(sessionId: string, tenant: string): void;
  tenantOf(sessionId: string): string | undefined;
  reloadEvery(): NodeJS.Timeout;
} {
  const { store, interest } = opts;
  /** Session → tenant (a session's tenant never changes), bounded; insertion order drops the oldest. */
  const tenants = new Map<string, string>();
  /** Session → when this process last marked it (ms), pruned as they age past `refreshMs`. */
  const marked = new Map<string, number>();
  const remember = (sessionId: string, tenant: string) => {
    if (tenants.has(sessionId)) return;
    if (tenants.size >= SESSION_TENANTS_MAX) tenants.delete(tenants.keys().next().value!);
    tenants.set(sessionId, tenant);
  };
  const landed = (sessionId: string) => () => opts.kick(sessionId);

  const tap: EventTap = (sessionId, types, tenantGiven) => {
    if (tenantGiven) remember(sessionId, tenantGiven);
    if (!interest.listens(types, undefined)) return undefined;
    const tenant = tenantGiven ?? tenants.get(sessionId);
    if (tenant !== undefined && !interest.listens(types, tenant)) return undefined;
    if (tenant === undefined) {
      // Marked anyway (the sweep finds the tenant); learn it for the next write.
      store.outbox.sessionTenant(sessionId).then(
        (t) => t && remember(sessionId, t),
        () => {},
      );
    }
    const now = Date.now();
    const last = marked.get(sessionId);
    if (last !== undefined && now - last < opts.refreshMs) return { landed: landed(sessionId) };
    marked.set(sessionId, now);
    const sent = store.outbox.mark(sessionId, now).then(
      () => {},
      (err: unknown) => {
        // Not marked: the next write marks again. The event write itself most likely failed too.
        marked.delete(sessionId);
        opts.log.warn({ err, session: sessionId }, 'webhook mark failed');
      },
    );
    return { ready: opts.isCluster ? sent : undefined, landed: landed(sessionId) };
  };

  const reloadEvery = () =>
    setInterval(() => {
      const cutoff = Date.now() - opts.refreshMs;
      for (const [id, at] of marked) if (at < cutoff) marked.delete(id);
      interest.loadAll().catch((err: unknown) => opts.log.warn({ err }, 'webhook interest reload failed'));
    }, RELOAD_MS).unref();

  return { tap, remember, tenantOf: (id) => tenants.get(id), reloadEvery };
}
