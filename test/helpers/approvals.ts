import assert from 'node:assert/strict';
import type { FakeReply } from '../../src/offline/wire.js';
import { toolCall } from '../fake/script.js';
import type { Harness } from './service.js';

/**
 * A session whose first reply calls get_weather (Oslo) as `call`, which needs approval (`approval: 'always'`), under
 * `policy` (its `action_timeout_s`, `on_action_timeout`, `ttl_s`…); the model answers `then` after. Resolves once it
 * waits for the approval, with its id and the session as read then (`required_action.expires_at`, `updated_at`).
 */
export async function awaitingApproval(
  h: Pick<Harness, 'api' | 'fake'>,
  call: string,
  policy: Record<string, unknown>,
  ...then: FakeReply[]
): Promise<{ id: string; waiting: any }> {
  h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: call }), ...then);
  const created = await h.api.post('/v1/sessions', {
    input: 'Weather in Oslo?',
    tools: ['get_weather'],
    approval: 'always',
    ...policy,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.id as string;
  const waiting = await h.api.waitStatus(id, ['requires_action', 'idle', 'failed']);
  assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting.error));
  return { id, waiting };
}
