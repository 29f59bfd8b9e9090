import { notFound, QuotaExceeded, RevisionMismatch } from '../errors.js';
import { channelName } from '../store/keys.js';
import { defineLuaCommands, type RedisClient } from '../store/lua-commands.js';
import {
  CHANGED_CHANNEL,
  decodeWebhook,
  DUE_KEY,
  encodeWebhook,
  indexEntry,
  TENANTS_KEY,
  tenantWebhooksKey,
  webhookKeys,
  type IndexEntry,
  type WebhookRecord,
} from './keys.js';
import { WebhookOutbox } from './outbox.js';

/**
 * The webhooks' door to Redis: webhook records, each tenant's index of its webhooks and the notice that it changed.
 * The delivery side (marks, fan-out cursors, outboxes) is `outbox` (src/webhooks/outbox.ts), built here on the same
 * client; key names and a record's hash fields are in src/webhooks/keys.ts. Every method is one command or one
 * script, or says in which order its steps run; each says what it guarantees atomically.
 */

export class WebhookStore {
  /** Marks, fan-out cursors, outboxes and the due set, on the same client and scripts. */
  readonly outbox: WebhookOutbox;

  constructor(readonly redis: RedisClient) {
    // lua/update.lua deletes every key of the webhook: its key count varies with the call (no `-<n>` suffix).
    defineLuaCommands(redis, new URL('./lua/', import.meta.url), 'wh');
    this.outbox = new WebhookOutbox(redis);
  }

  /**
   * Follows the changes any replica publishes (a tenant's set of webhooks changed) on `sub`, a connection in
   * subscriber mode shared with other channels: `onTenant(tenant)` for each change, `onReconnect()` each time the
   * connection is ready again (changes published while it was away are lost). Returns what stops following.
   */
  async followChanges(
    sub: RedisClient,
    onTenant: (tenant: string) => void,
    onReconnect: () => void,
  ): Promise<() => void> {
    const changed = channelName(sub, CHANGED_CHANNEL);
    const onMessage = (channel: string, tenant: string) => {
      if (channel === changed) onTenant(tenant);
    };
    sub.on('message', onMessage);
    sub.on('ready', onReconnect);
    await sub.subscribe(changed);
    return () => {
      sub.off('message', onMessage);
      sub.off('ready', onReconnect);
    };
  }

  // ---- webhooks ------------------------------------------------------------------------------------------

  /**
   * Lists the webhook in its tenant's index (refused with 429 `quota_exceeded` at `max`, atomically with the count)
   * and then writes it (one HSET). A crash between the two leaves an index entry without a webhook, which listing
   * skips and the fan-out ignores.
   */
  async create(w: WebhookRecord, max: number): Promise<void> {
    await this.redis.sadd(TENANTS_KEY, w.tenant);
    const ok = await this.redis.whIndexAdd(
      tenantWebhooksKey(w.tenant),
      w.id,
      JSON.stringify(indexEntry(w)),
      max,
    );
    if (ok !== 1)
      throw new QuotaExceeded('quota_exceeded', `A tenant has at most ${max} webhooks.`, {
        quota: 'WEBHOOK_MAX_PER_TENANT',
        limit: max,
      });
    await this.redis.hset(webhookKeys(w.id).meta, encodeWebhook(w));
    await this.changed(w.tenant);
  }

  /** The webhook if it exists and is `tenant`'s; 404 `webhook_not_found` otherwise. One HGETALL. */
  async get(tenant: string, id: string): Promise<WebhookRecord> {
    const h = await this.redis.hgetall(webhookKeys(id).meta);
    if (!h['id'] || h['tenant'] !== tenant) throw notFound('webhook');
    return decodeWebhook(h);
  }

  /** The tenant's webhooks, oldest first; index entries without a webhook are dropped on the way. */
  async list(tenant: string): Promise<WebhookRecord[]> {
    const ids = await this.redis.hkeys(tenantWebhooksKey(tenant));
    const all = await Promise.all(ids.map((id) => this.redis.hgetall(webhookKeys(id).meta)));
    const out: WebhookRecord[] = [];
    for (const [i, h] of all.entries()) {
      if (h['id'] && h['tenant'] === tenant) out.push(decodeWebhook(h));
      else await this.redis.hdel(tenantWebhooksKey(tenant), ids[i]!);
    }
    return out.sort((a, b) => a.createdAt - b.createdAt || a.id.localeCompare(b.id));
  }

  /** The index of a tenant (fan-out, interest cache): one HGETALL. */
  async index(tenant: string): Promise<Map<string, IndexEntry>> {
    const h = await this.redis.hgetall(tenantWebhooksKey(tenant));
    const out = new Map<string, IndexEntry>();
    for (const [id, raw] of Object.entries(h)) {
      try {
        const entry: IndexEntry = JSON.parse(raw);
        out.set(id, entry);
      } catch {
        /* a foreign or damaged entry is not a webhook */
      }
    }
    return out;
  }

  /** The tenants that have (or had) webhooks. One SMEMBERS. */
  tenants(): Promise<string[]> {
    return this.redis.smembers(TENANTS_KEY);
  }

  /**
   * Changes fields of the webhook, atomically guarded by tenant and `ifRevision` (404 / 412), bumping its revision;
   * then (enabled again) its kept messages are made due, its index entry is rewritten and the change published.
   */
  async patch(
    tenant: string,
    id: string,
    fields: Record<string, string>,
    ifRevision: number | undefined,
  ): Promise<WebhookRecord> {
    const k = webhookKeys(id);
    const res = await this.redis.whUpdate(
      1,
      k.meta,
      tenant,
      ifRevision === undefined ? '' : String(ifRevision),
      'patch',
      JSON.stringify(fields),
    );
    this.check(res);
    // Enabled again: what its outbox kept is due now (a disabled endpoint left the due set at its last claim, and a
    // full outbox adds nothing that would bring it back).
    if (fields['disabled'] === '0') await this.outbox.nudgeNow(id);
    const w = await this.get(tenant, id);
    await this.reindex(w);
    return w;
  }

  /** Deletes the webhook and its whole outbox in one script (guarded like `patch`), then its index entry. */
  async remove(tenant: string, id: string, ifRevision: number | undefined): Promise<void> {
    const k = webhookKeys(id);
    const keys = [k.meta, k.queue, k.payloads, k.attempts, k.inflight, k.log, k.settled];
    const res = await this.redis.whUpdate(
      keys.length,
      ...keys,
      tenant,
      ifRevision === undefined ? '' : String(ifRevision),
      'delete',
      '{}',
    );
    this.check(res);
    await this.redis.hdel(tenantWebhooksKey(tenant), id);
    await this.redis.zrem(DUE_KEY, id);
    await this.changed(tenant);
  }

  private check(res: [string, string | number, string?]): void {
    if (res[0] !== 'ERR') return;
    if (res[1] === 'revision') {
      const cur = Number(res[2]);
      throw new RevisionMismatch(cur, 'webhook');
    }
    throw notFound('webhook');
  }

  /**
   * Rewrites the webhook's index entry from its record (after a patch or when it was disabled) and publishes. The
   * hash and the index live on different slots, so a writer holding an older record (the dispatcher disabling the
   * webhook while a PATCH enables it) could write last and leave the index stale for good. So each writer reads the
   * hash again after its write and writes again until the revision it wrote is the one stored: every change bumps
   * the revision and reindexes after it, so the last write is of the last revision. A deleted webhook's entry is
   * dropped (its `remove` may have run before this write).
   */
  async reindex(w: WebhookRecord): Promise<void> {
    const index = tenantWebhooksKey(w.tenant);
    let cur = w;
    for (let round = 0; round < 10; round++) {
      await this.redis.hset(index, cur.id, JSON.stringify(indexEntry(cur)));
      const stored = await this.load(cur.id);
      if (!stored) {
        await this.redis.hdel(index, cur.id);
        break;
      }
      if (stored.revision === cur.revision) break;
      cur = stored;
    }
    await this.changed(w.tenant);
  }

  /** Tells every replica that the tenant's set of webhooks changed. One PUBLISH. */
  async changed(tenant: string): Promise<void> {
    await this.redis.publish(channelName(this.redis, CHANGED_CHANNEL), tenant);
  }

  /** The webhook as stored, whoever its tenant (the dispatcher). */
  async load(id: string): Promise<WebhookRecord | null> {
    const h = await this.redis.hgetall(webhookKeys(id).meta);
    return h['id'] ? decodeWebhook(h) : null;
  }
}
