/**
 * A worker's result is answered whatever its tenant stores: a tenant at TENANT_MAX_BYTES still gets its calls'
 * results into their sessions (counted, not refused), as a run's own commits are; its clients' writes that add bytes
 * are refused meanwhile.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { storageKey } from '../../src/store/storage-quota.js';

const MAX = 1_000_000;

describe("a worker's result at the tenant's storage limit", { timeout: 60_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TENANT_MAX_BYTES: String(MAX) } });
    a = h.api.as('key-a');
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r.disconnect();
    await h?.close();
  });

  it('is delivered and the session goes on; a client write that adds bytes is refused', async () => {
    const put = await a.req('PUT', '/v1/tools/ship_order', {
      description: 'Ship an order.',
      input_schema: { type: 'object', properties: { order: { type: 'number' } } },
      runner: { type: 'worker' },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    h.fake.enqueue(toolCalls([toolUse('ship_order', { order: 3 }, 'toolu_full')]), text('Shipped.'));
    const id = (await a.post('/v1/sessions', { input: 'ship 3', tools: ['ship_order'] })).body.id;
    const claimed = await a.post('/v1/tool-tasks/claim', { tools: ['ship_order'], wait_ms: 20000 });
    const task = claimed.body.tasks[0];
    assert.ok(task, JSON.stringify(claimed.body));
    // The tenant reaches its limit while the worker works.
    await r.set(storageKey('acme'), MAX);
    const refused = await a.post('/v1/sessions', { input: 'x'.repeat(1000), start: false });
    assert.equal(refused.status, 429);
    assert.equal(refused.body.error.details.quota, 'storage_bytes');
    const res = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'shipped' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    const done = await a.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(done.stop_reason, 'end_turn', JSON.stringify(done.error));
    assert.ok(Number(await r.get(storageKey('acme'))) > MAX, 'the result is counted');
  });
});
