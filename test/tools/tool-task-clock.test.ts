/**
 * Tool-task leases and deadlines are of Redis's clock, not of the replica's: a replica whose clock is far ahead does
 * not sweep another replica's live lease as lapsed (the tool then ran twice), and one whose clock is behind does not
 * renew a lease into the past. The skewed replica is this process with its Date.now() moved (the service runs in
 * it): its sweep (tasks' `tt:due` claim and the tenant's sweep script), claim and heartbeat run with that clock.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import type { ToolTasks } from '../../src/tenant-tools/service.js';
import { taskKeys } from '../../src/tenant-tools/keys.js';
import { skewed } from '../helpers/skewed-clock.js';

const LEASE_MS = 20_000;
/** Far more than a lease, either way. */
const SKEW_MS = 10 * 60_000;

describe('tool-task leases with a replica whose clock is off', { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: 'acme:key-a', TOOL_TASK_LEASE_MS: String(LEASE_MS) } });
    a = h.api.as('key-a');
    r = new Redis(h.redis.url);
    const put = await a.req('PUT', '/v1/tools/lookup', {
      description: 'Look an order up.',
      input_schema: { type: 'object', properties: { id: { type: 'number' } } },
      runner: { type: 'worker' },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });

  it('a live lease is neither swept by a replica ahead nor renewed into the past by one behind', async () => {
    const tasks: ToolTasks = h.service.app.toolTasks;
    h.fake.enqueue(toolCalls([toolUse('lookup', { id: 1 }, 'toolu_clock')]), text('found'));
    const id = (await a.post('/v1/sessions', { input: 'look 1', tools: ['lookup'] })).body.id;
    const claim = await a.post('/v1/tool-tasks/claim', {
      tools: ['lookup'],
      wait_ms: 20_000,
      worker_id: 'w1',
    });
    const task = claim.body.tasks[0];
    assert.equal(task?.attempt, 1, JSON.stringify(claim.body));
    const expires = Date.parse(task.lease_expires_at);
    assert.ok(
      Math.abs(expires - (Date.now() + LEASE_MS)) < 5000,
      `lease_expires_at ${task.lease_expires_at}`,
    );
    // `Date` is of the leases' clock (Redis's), whatever the replica's: a worker's lease is the difference.
    const leaseDate = (expiresAt: string) => new Date(Date.parse(expiresAt) - LEASE_MS).toUTCString();
    assert.equal(claim.headers.get('date'), leaseDate(task.lease_expires_at));
    const call = (await r.hget(taskKeys('acme').offers, task.id))!;

    // A replica 10 minutes ahead sweeps (its loop's pass, then the tenant directly) and claims.
    const swept = await skewed(SKEW_MS, async () => {
      await tasks.sweep();
      const direct = await tasks.queue.sweep('acme');
      const claimed = await tasks.queue.claim('acme', ['lookup'], 1, 'w-ahead');
      return { direct, claimed };
    });
    assert.deepEqual(swept.direct.changes, [], 'the live lease was not taken for lapsed');
    assert.deepEqual(swept.claimed, [], 'the call was not offered again');
    const rec = (await tasks.queue.record('acme', call))!.rec;
    assert.equal(rec.state, 'leased');
    assert.equal(rec.offer, task.id);
    assert.equal(rec.attempt, 1);

    // A replica 10 minutes behind renews the lease from Redis's now, not into the past.
    const renewed = await skewed(-SKEW_MS, () => tasks.heartbeat('acme', task.id));
    const at = Date.parse(renewed.lease_expires_at);
    assert.ok(
      at >= expires && at < Date.now() + LEASE_MS + 5000,
      `renewed until ${renewed.lease_expires_at}`,
    );
    const leased = Number(await r.zscore(taskKeys('acme').leased, call));
    assert.equal(leased, at, 'the lease stored is the one answered');

    const beat = await a.post(`/v1/tool-tasks/${task.id}/heartbeat`);
    assert.equal(beat.status, 200, JSON.stringify(beat.body));
    assert.equal(beat.headers.get('date'), leaseDate(beat.body.lease_expires_at));

    // The worker's result is taken; the tool ran once.
    const ok = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'order 1: shipped' });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    await h.api.waitStatus(id, 'idle', 20_000);
    const types = (await r.xrange(`s:{${id}}:e`, '-', '+')).map(([, f]) => {
      for (let i = 0; i + 1 < f.length; i += 2) if (f[i] === 't') return f[i + 1];
      return '';
    });
    assert.equal(types.filter((t) => t === 'tool_task.retried').length, 0);
    assert.equal(types.filter((t) => t === 'tool.started').length, 1);
  });
});
