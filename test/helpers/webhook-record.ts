/** A webhook record as the routes store it, for tests that drive the webhook store, outbox or fan-out directly. */
import type { WebhookRecord } from '../../src/webhooks/keys.js';

/** Webhook `id` of `tenant` on `session.status`, created a second ago, enabled, never failing. */
export function webhookRecord(id: string, tenant: string, over: Partial<WebhookRecord> = {}): WebhookRecord {
  const now = Date.now() - 1000;
  return {
    id,
    tenant,
    url: 'https://hooks.example/x',
    events: ['session.status'],
    description: null,
    secret: 'x',
    createdAt: now,
    updatedAt: now,
    revision: 1,
    disabled: false,
    failingSince: null,
    ...over,
  };
}
