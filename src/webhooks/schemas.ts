import { z } from 'zod';
import { intQuery } from '../int-param.js';
import type { WebhookRecord } from './keys.js';

/**
 * Event types a webhook may name: every type a session's log holds (docs/API.md §5.2; test/webhooks/webhooks-events.test.ts
 * checks the two lists are the same).
 */
export const EVENT_TYPES = [
  'session.created',
  'session.updated',
  'session.deleted',
  'session.status',
  'session.error',
  'session.cancel_requested',
  'turn.started',
  'turn.completed',
  'turn.dropped',
  'stream.event',
  'tool.started',
  'tool.progress',
  'tool.completed',
  'tool_task.retried',
  'iteration.persisted',
  'message.queued',
  'message.appended',
  'messages.replaced',
  'tool_call.decided',
  'tool_result.submitted',
  'tool_result.replaced',
  'params.updated',
  'tools.updated',
  'tools.applied',
  'compaction.started',
  'compaction.completed',
  'compaction.skipped',
  'schedule.created',
  'schedule.deleted',
  'schedule.fired',
  'schedule.skipped',
  'schedule.updated',
  'client_token.created',
  'client_token.revoked',
  'action.expiring',
  'action.timed_out',
  'children.waiting',
] as const;

/** The type of the event a test delivery carries (`POST /v1/webhooks/:id/test`). */
export const TEST_EVENT_TYPE = 'webhook.test';

// Its length (MAX_URL_LENGTH) and form are checked by parseWebhookUrl (address-guard.ts), which answers 400
// `invalid_webhook_url` as the contract says; the body's limit bounds what reaches it.
const url = z.string();
const events = z
  .array(z.enum(EVENT_TYPES))
  .min(1)
  .max(EVENT_TYPES.length)
  .refine((a) => new Set(a).size === a.length, 'each event type once');
const description = z.string().max(512);

export const createWebhookBody = z.strictObject({
  url,
  events: events.optional(),
  description: description.optional(),
});

export const patchWebhookBody = z.strictObject({
  url: url.optional(),
  events: events.optional(),
  description: description.nullable().optional(),
  /** `false` re-enables an endpoint that was disabled after failing (or by a PATCH); `true` pauses it. */
  disabled: z.boolean().optional(),
});

export const webhookIdParam = z.strictObject({ id: z.string().regex(/^wh_[A-Za-z0-9]{1,40}$/) });

export const deliveriesQuery = z.strictObject({ limit: intQuery(1, 100, 50) });

/** A webhook as the API shows it: never its secret (shown once, in the answer to its creation). */
export function webhookView(w: WebhookRecord) {
  return {
    id: w.id,
    object: 'webhook' as const,
    url: w.url,
    events: w.events,
    description: w.description,
    disabled: w.disabled,
    failing_since: w.failingSince === null ? null : new Date(w.failingSince).toISOString(),
    revision: w.revision,
    created_at: new Date(w.createdAt).toISOString(),
    updated_at: new Date(w.updatedAt).toISOString(),
  };
}
