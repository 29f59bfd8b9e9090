/**
 * The webhooks' data in Redis: the names of their keys and the fields of a webhook's hash, written and read here.
 * Keys (hash tags keep each script on one slot of a Redis Cluster):
 *
 * - `wh:{W}` HASH — webhook W: id, tenant, url, events (JSON), description, secret (sealed), created_at,
 *   updated_at, revision, disabled ('0'|'1'), failing_since (ms), delivered_at (ms of the last 2xx).
 * - `wh:{W}:q` ZSET msg → due ms; `wh:{W}:m` HASH msg → body; `wh:{W}:a` HASH msg → "attempts:first ms";
 *   `wh:{W}:f` ZSET msg → lease expiry (in flight); `wh:{W}:d` LIST deliveries log; `wh:{W}:s` ZSET msg → ms
 *   (settled lately: a replayed fan-out does not enqueue them again). Together: W's outbox.
 * - `wht:{T}` HASH W → `{"events","disabled","created_at"}`: tenant T's webhooks (what a fan-out needs).
 * - `wh:tenants` SET of tenants that have webhooks; `wh:due` ZSET W → next due ms; `wh:marks` ZSET session → ms
 *   of its newest mark (a session with events maybe not yet fanned out: src/webhooks/tap.ts).
 * - `s:{S}:wh` HASH (c = fan-out cursor, t = tenant) and `s:{S}:whl` (fan-out lease): in the session's slot.
 */

export const webhookKeys = (id: string) => ({
  meta: `wh:{${id}}`,
  queue: `wh:{${id}}:q`,
  payloads: `wh:{${id}}:m`,
  attempts: `wh:{${id}}:a`,
  inflight: `wh:{${id}}:f`,
  log: `wh:{${id}}:d`,
  settled: `wh:{${id}}:s`,
});
export const tenantWebhooksKey = (tenant: string) => `wht:{${tenant}}`;
export const TENANTS_KEY = 'wh:tenants';
export const DUE_KEY = 'wh:due';
export const MARKS_KEY = 'wh:marks';
/** Pub/sub: a tenant's set of webhooks changed (message: the tenant). */
export const CHANGED_CHANNEL = 'wh:changed';
export const fanoutState = (sessionId: string) => `s:{${sessionId}}:wh`;
export const fanoutLease = (sessionId: string) => `s:{${sessionId}}:whl`;

export interface WebhookRecord {
  id: string;
  tenant: string;
  url: string;
  events: string[];
  description: string | null;
  /** As stored (sealed when a key is configured). */
  secret: string;
  createdAt: number;
  updatedAt: number;
  revision: number;
  disabled: boolean;
  failingSince: number | null;
}

/** What a fan-out needs to know of a tenant's webhook (kept in the tenant's index). */
export interface IndexEntry {
  events: string[];
  disabled: boolean;
  created_at: number;
}

/** The event types of a webhook hash's `events` field (a JSON array of strings, as `encodeWebhook` writes it). */
function parseEvents(raw: string | undefined): string[] {
  const parsed: unknown = JSON.parse(raw ?? '[]');
  return Array.isArray(parsed) ? parsed.map(String) : [];
}

/** The fields of a new webhook's hash; `failing_since` and `delivered_at` are set by its deliveries (settle-7.lua). */
export function encodeWebhook(w: WebhookRecord): Record<string, string> {
  return {
    id: w.id,
    tenant: w.tenant,
    url: w.url,
    events: JSON.stringify(w.events),
    description: w.description ?? '',
    secret: w.secret,
    created_at: String(w.createdAt),
    updated_at: String(w.updatedAt),
    revision: String(w.revision),
    disabled: w.disabled ? '1' : '0',
  };
}

export function decodeWebhook(h: Record<string, string>): WebhookRecord {
  return {
    id: h['id']!,
    tenant: h['tenant']!,
    url: h['url']!,
    events: parseEvents(h['events']),
    description: h['description'] ? h['description'] : null,
    secret: h['secret'] ?? '',
    createdAt: Number(h['created_at'] ?? 0),
    updatedAt: Number(h['updated_at'] ?? 0),
    revision: Number(h['revision'] ?? 1),
    disabled: h['disabled'] === '1',
    failingSince: h['failing_since'] ? Number(h['failing_since']) : null,
  };
}

export const indexEntry = (w: WebhookRecord): IndexEntry => ({
  events: w.events,
  disabled: w.disabled,
  created_at: w.createdAt,
});
