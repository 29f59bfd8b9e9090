/**
 * Issue 23: the store speaks domain errors. Whatever store operation meets a Redis that is down or refuses writes —
 * not only the session's `apply` and `load` — rejects with `StoreUnavailable` (the Redis error as its `cause`),
 * whichever module sends the command (sessions, run queue, due sets, spend, webhooks, tenant tools, memory, schedules,
 * MCP servers, the event log, the subscriber connection), and the routes on them answer 503 `store_unavailable` with
 * Retry-After. Three ways a real redis-server fails: full (maxmemory under noeviction: `-OOM`), hung (CLIENT PAUSE: a
 * command times out, then the health probe refuses commands at once), gone (killed).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { StoreUnavailable } from '../../src/errors.js';
import { ClientTokens } from '../../src/store/client-tokens.js';
import { webhookRecord } from '../helpers/webhook-record.js';
import { startHarness, type Api, type ApiResponse, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { until } from '../durability/chaos-lib.js';

/** `p` rejects with StoreUnavailable whose cause (the client's error) says `cause`. */
async function assertStoreUnavailable(p: Promise<unknown>, what: string, cause: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof StoreUnavailable, `${what}: ${String(err)}`);
    assert.equal(err.code, 'store_unavailable');
    assert.match(err.cause instanceof Error ? err.cause.message : String(err.cause), cause, what);
    return true;
  });
}

function assert503(res: ApiResponse, what: string): void {
  assert.equal(res.status, 503, `${what}: ${JSON.stringify(res.body)}`);
  assert.equal(res.body.error.code, 'store_unavailable', what);
  assert.ok(Number(res.headers.get('retry-after')) > 0, `${what}: Retry-After`);
}

const day = new Date().toISOString().slice(0, 10);

describe('the store boundary: StoreUnavailable from every store operation', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let h: Harness;
  let acme: Api;
  let admin: Redis;

  before(async () => {
    redis = await startTestRedis({ appendonly: false });
    admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    admin.on('error', () => {});
    h = await startHarness({ redis, env: { API_KEYS: 'acme:key-acme' } });
    acme = h.api.as('key-acme');
  });
  after(async () => {
    admin?.disconnect();
    await h?.close();
    await redis?.stop();
  });

  it('Redis full (OOM): writes of every store reject with StoreUnavailable; their routes answer 503', async () => {
    const app = h.service.app;
    const session = (await acme.post('/v1/sessions', { start: false })).body;
    assert.ok(session.id);
    // maxmemory at half of what is used (noeviction): every write is refused, whatever moves by a few kilobytes.
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))![1]);
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', String(Math.max(1, Math.floor(used / 2))));
    try {
      await assert.rejects(admin.set('junk', 'j'.repeat(100_000)), /OOM/);
      const now = Date.now();
      const webhook = webhookRecord('wh_boundary', 'acme', {
        url: 'https://example.com/hook',
        secret: 'whsec_x',
      });
      const oom = /OOM/;
      await assertStoreUnavailable(app.store.index.add('acme', session.id, now), 'SessionIndex.add', oom);
      await assertStoreUnavailable(
        app.store.appendEvents(session.id, [['test.note', '{}']]),
        'SessionStore.appendEvents (a script)',
        oom,
      );
      await assertStoreUnavailable(app.store.actionsDue.add(session.id, now + 60_000), 'DueSet.add', oom);
      await assertStoreUnavailable(
        app.store.spend.record('acme', { in: 1, out: 1, cw: 0, cr: 0, cost: 0, nc: 0 }),
        'TenantSpend.record (a script)',
        oom,
      );
      await assertStoreUnavailable(
        app.redis.multi().set('boundary:multi', 'x'.repeat(100_000)).exec(),
        'a MULTI Redis discards (EXECABORT)',
        /EXECABORT/,
      );
      await assertStoreUnavailable(app.webhooks.store.create(webhook, 10), 'WebhookStore.create', oom);
      await assertStoreUnavailable(app.memory.write('acme', 'notes.md', 'x'), 'MemoryStore.write', oom);

      assert503(
        await acme.req('PUT', '/v1/tools/boundary_tool', {
          description: 'A tool',
          input_schema: { type: 'object' },
          runner: { type: 'worker' },
        }),
        'PUT /v1/tools/:name (TenantToolRegistry.put)',
      );
      // Reads still work.
      assert.equal((await acme.get(`/v1/sessions/${session.id}`)).status, 200);
      assert.equal((await acme.get('/v1/webhooks')).status, 200);
    } finally {
      await admin.config('SET', 'maxmemory', '0');
    }
    assert.equal((await h.api.get('/readyz')).status, 200);
  });

  it('Redis hung (CLIENT PAUSE): a command that times out, and one the health probe refuses, both reject with StoreUnavailable', async () => {
    const app = h.service.app;
    assert.equal(await admin.call('CLIENT', 'PAUSE', '8000', 'ALL'), 'OK');
    await assertStoreUnavailable(
      app.store.index.list('acme', { limit: 10 }),
      'SessionIndex.list as Redis froze',
      // Sent, then timed out; on a busy machine the probe may have noticed the hang first (a list sends several
      // commands, one after another), and then the next of them was refused unsent. Both are the hang.
      /Command timed out|Redis is not answering/,
    );
    // Once the probe (src/redis/health.ts) has seen Redis hang, commands are refused without being sent.
    const refused = await until(
      () =>
        app.webhooks.store.list('acme').then(
          () => null,
          (err: unknown) => err,
        ),
      5000,
      'a command refused by the probe',
    );
    assert.ok(refused instanceof StoreUnavailable, String(refused));
    assert.match(String(refused.cause), /Redis is not answering/);
    await assertStoreUnavailable(app.tenantTools.list('acme'), 'TenantToolRegistry.list', /not answering/);
    await assertStoreUnavailable(app.mcp.tenants.list('acme'), 'TenantMcpStore.list', /not answering/);
    assert503(await acme.get('/v1/webhooks'), 'GET /v1/webhooks while Redis hangs');
    await until(async () => (await h.api.get('/readyz')).status === 200, 15_000, 'ready once the pause ends');
  });

  it('Redis gone (killed): reads of every store and the event log reject with StoreUnavailable; routes answer 503', async () => {
    const app = h.service.app;
    const session = (await acme.post('/v1/sessions', { start: false })).body;
    await redis.kill();
    try {
      const down = /Connection is closed|ECONNREFUSED|max retries per request/i;
      await assertStoreUnavailable(app.store.index.list('acme', { limit: 10 }), 'SessionIndex.list', down);
      await assertStoreUnavailable(app.store.history(session.id), 'SessionStore.history', down);
      await assertStoreUnavailable(app.store.events(session.id, '0-0', 10), 'SessionStore.events', down);
      await assertStoreUnavailable(
        app.eventsHub.eventLog.page(session.id, '0-0', { count: 10, maxBytes: 65_536 }),
        'EventLog.page (the event reader)',
        down,
      );
      await assertStoreUnavailable(app.eventsHub.eventLog.lastId(session.id), 'EventLog.lastId', down);
      await assertStoreUnavailable(app.store.runs.leaseHolder(session.id), 'RunQueue.leaseHolder', down);
      await assertStoreUnavailable(app.store.spend.days('acme', day, day), 'TenantSpend.days (MULTI)', down);
      await assertStoreUnavailable(app.webhooks.store.list('acme'), 'WebhookStore.list', down);
      await assertStoreUnavailable(
        app.schedules.store.list('acme', 10, undefined, 1_048_576),
        'ScheduleStore.list',
        down,
      );
      await assertStoreUnavailable(app.tenantTools.list('acme'), 'TenantToolRegistry.list', down);
      await assertStoreUnavailable(app.memory.list('acme', ''), 'MemoryStore.list', down);
      await assertStoreUnavailable(
        new ClientTokens(app.redis, app.store.clock, app.store.storage).revoke('acme', session.id, 'ct_x', [
          'client_token.revoked',
          '{}',
        ]),
        'ClientTokens.revoke',
        down,
      );
      await assertStoreUnavailable(
        app.channels.watchEvents(session.id),
        'SessionChannels.watchEvents (the subscriber connection)',
        down,
      );

      for (const path of ['/v1/sessions', '/v1/webhooks', '/v1/memory', '/v1/usage', '/v1/schedules'])
        assert503(await acme.get(path), `GET ${path}`);
    } finally {
      await redis.restart();
    }
    // (Started without an AOF, it comes back empty: the store answers, with nothing.)
    await until(
      () =>
        app.store.index.list('acme', { limit: 10 }).then(
          () => true,
          () => false,
        ),
      10_000,
      'the store answers again',
    );
  });
});
