/**
 * Every event type a session's log may hold can be subscribed to: the webhook schema's list is the table of
 * docs/API.md §5.2, no more and no less (the four types once missing: tool_result.submitted, turn.dropped,
 * tools.applied, session.cancel_requested).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { EVENT_TYPES, createWebhookBody } from '../../src/webhooks/schemas.js';
import { ROOT } from '../helpers/openapi.js';

function documentedTypes(): string[] {
  const api = readFileSync(path.join(ROOT, 'docs/API.md'), 'utf8');
  const section = api.slice(api.indexOf('### 5.2 Types'), api.indexOf('## 6. Event transports'));
  return [...section.matchAll(/^\| `([a-z_]+\.[a-z_]+)` +\|/gm)].map((m) => m[1]!);
}

test('the webhook event types are the documented event types', () => {
  const documented = documentedTypes();
  assert.ok(documented.length > 20, `the table was read: ${documented.length} types`);
  assert.deepEqual([...EVENT_TYPES].sort(), [...documented].sort());
});

test('each can be named in a webhook', () => {
  for (const type of ['tool_result.submitted', 'turn.dropped', 'tools.applied', 'session.cancel_requested']) {
    const parsed = createWebhookBody.safeParse({ url: 'https://hooks.example/x', events: [type] });
    assert.ok(parsed.success, `${type}: ${JSON.stringify(parsed.error?.issues)}`);
  }
});
