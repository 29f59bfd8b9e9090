import { Webhook } from 'standardwebhooks';
import type { Event } from './follow.js';

/**
 * Checks a webhook delivery of the service (Standard Webhooks: `webhook-id`, `webhook-timestamp`,
 * `webhook-signature`) with the endpoint's secret (`whsec_…`, shown once when the endpoint was created), and returns
 * the event envelope it carries. Throws (standardwebhooks' WebhookVerificationError) when the signature does not
 * match or the timestamp is more than 5 minutes away. `body` must be the raw body as received, not re-serialised
 * JSON. The same `webhook-id` comes with every attempt of one event: deduplicate on it (or on the event's `id`).
 */
export function verifyWebhook(
  secret: string,
  body: string,
  headers: Headers | Record<string, string | string[] | undefined>,
): Event {
  const flat: Record<string, string> = {};
  if (headers instanceof Headers) {
    headers.forEach((value, key) => (flat[key] = value));
  } else {
    for (const [key, value] of Object.entries(headers)) {
      if (value !== undefined) flat[key.toLowerCase()] = Array.isArray(value) ? value.join(' ') : value;
    }
  }
  return new Webhook(secret).verify(body, flat) as Event;
}

export { WebhookVerificationError } from 'standardwebhooks';
