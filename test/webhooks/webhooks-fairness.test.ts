/**
 * The fan-out is fair (docs/ARCHITECTURE.md, webhooks): a session whose log never stops growing (a fast stream
 * under a webhook on `stream.event`), or many sessions with a backlog, of one tenant do not hold back another
 * tenant's sessions until their marks are swept; each session's events still reach each outbox once, in order.
 * Real Redis, the fan-out alone (no service, no dispatcher): the outboxes are observed through `enqueue`.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { Fanout } from '../../src/webhooks/fanout.js';
import { WebhookStore } from '../../src/webhooks/store.js';
import { webhookRecord } from '../helpers/webhook-record.js';

const DATA = '{"status":"idle","required_action":null,"stop_reason":"end_turn","error":null}';

describe('the webhook fan-out', { timeout: 120_000 }, () => {
  let redis: TestRedis;
  let client: Redis;
  let store: WebhookStore;
  before(async () => {
    redis = await startTestRedis();
    client = new Redis(redis.url);
    store = new WebhookStore(client);
  });
  after(async () => {
    client?.disconnect();
    await redis?.stop();
  });

  async function webhook(id: string, tenant: string): Promise<void> {
    await store.create(webhookRecord(id, tenant), 10);
  }

  async function session(id: string, tenant: string, events: number): Promise<void> {
    const p = client.pipeline();
    p.hset(`s:{${id}}`, 'id', id, 'tenant', tenant, 'status', 'idle');
    for (let i = 0; i < events; i++)
      p.xadd(`s:{${id}}:e`, '*', 't', 'session.status', 'd', DATA, 'r', String(i), 'at', String(Date.now()));
    await p.exec();
  }

  it("serves another tenant's session before one tenant's backlog is fanned out, keeping each session's order", async () => {
    await webhook('wh_fairA', 'tenant-a');
    await webhook('wh_fairB', 'tenant-b');
    // More busy sessions of A than sweeps run at once, each with a backlog of many pages.
    const aSessions = Array.from({ length: 12 }, (_, i) => `ses_fairA${i}`);
    const perA = 2000;
    for (const id of aSessions) await session(id, 'tenant-a', perA);
    await session('ses_fairB0', 'tenant-b', 3);

    // Every message put in an outbox, in the order the outbox took it.
    const taken = new Map<string, string[]>();
    /** Of each of A's sessions, how many events its outbox held when B's first one was taken. */
    let aWhenB: number[] | undefined;
    const enqueue = store.outbox.enqueue.bind(store.outbox);
    store.outbox.enqueue = async (webhookId, messages, bounds) => {
      const r = await enqueue(webhookId, messages, bounds);
      let list = taken.get(webhookId);
      if (!list) taken.set(webhookId, (list = []));
      list.push(...messages.map(([id]) => id));
      if (webhookId === 'wh_fairB' && !aWhenB) {
        const a = taken.get('wh_fairA') ?? [];
        aWhenB = aSessions.map((id) => a.filter((m) => m.startsWith(`msg_${id}_`)).length);
      }
      return r;
    };
    const tenants = new Map([
      ...aSessions.map((id) => [id, 'tenant-a'] as const),
      ['ses_fairB0', 'tenant-b'],
    ]);
    let doneResolve!: () => void;
    const done = new Promise<void>((res) => (doneResolve = res));
    const fanout = new Fanout({
      store,
      owner: 'test-owner',
      maxPending: { count: 100_000, bytes: 1 << 30 },
      log: pino({ level: 'silent' }),
      tenantOf: (id) => tenants.get(id),
      enqueued: () => {
        if ((taken.get('wh_fairA')?.length ?? 0) === aSessions.length * perA && taken.get('wh_fairB')?.length)
          doneResolve();
      },
      graceMs: 60_000,
    });
    for (const id of aSessions) fanout.kick(id);
    fanout.kick('ses_fairB0');
    await done;
    fanout.close();

    assert.equal(taken.get('wh_fairB')!.length, 3);
    // Not one of A's sessions had its backlog fanned out when B's session was served.
    assert.ok(aWhenB, "B's events were taken");
    assert.ok(
      aWhenB.every((n) => n < perA),
      `B's session waited for A's sessions: ${aWhenB.join(',')} of ${perA} events each before it`,
    );
    // Each of A's events once, and each session's events in log order.
    const aIds = taken.get('wh_fairA')!;
    assert.equal(new Set(aIds).size, aIds.length);
    for (const id of aSessions) {
      const mine = aIds.filter((m) => m.startsWith(`msg_${id}_`)).map((m) => m.slice(`msg_${id}_`.length));
      const log = (await client.xrange(`s:{${id}}:e`, '-', '+')).map(([eid]) => eid);
      assert.deepEqual(mine, log, `${id}: every event once, in order`);
    }
  });
});
