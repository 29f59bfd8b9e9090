/**
 * Webhooks across failures, with real service processes, a real redis-server and a real HTTP receiver: the
 * receiver answers 500 to the first attempts, then hangs (an attempt is in flight on the only replica), which is
 * then SIGKILLed; the receiver is down while a second replica takes over, then accepts. Every `session.status`
 * event of three sessions arrives, verified with the `standardwebhooks` verifier, each id accepted once by the
 * receiver's dedup, none lost.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { hang, startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { LoopModel, tagged, until } from '../durability/chaos-lib.js';

describe(
  'webhook deliveries survive failures of the endpoint and of the delivering replica',
  { timeout: 240_000 },
  () => {
    let redis: TestRedis;
    let fake: FakeAnthropic;
    const receiver = new WebhookReceiver();
    const procs: ServiceProcess[] = [];

    const start = async (name: string) => {
      const p = await spawnService(
        serviceEnv(redis.url, fake.url, {
          WEBHOOK_ALLOW_PRIVATE: 'true',
          WEBHOOK_RETRY_BASE_MS: '100',
          WEBHOOK_RETRY_MAX_MS: '400',
          WEBHOOK_TIMEOUT_MS: '1000',
          WEBHOOK_POLL_MS: '100',
          WEBHOOK_SWEEP_GRACE_MS: '4000',
        }),
        { name },
      );
      procs.push(p);
      return p;
    };

    before(async () => {
      [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
      await receiver.start();
    });
    after(async () => {
      await Promise.all(procs.map((p) => p.kill()));
      await receiver.close();
      await fake?.close();
      await redis?.stop();
    });

    it('delivers every session.status event once, verified, across 500s, a hang, a SIGKILL and an outage', async () => {
      let holdTurn2 = true;
      const model = new LoopModel({
        turns: 4,
        // Turn 2 hangs on the first replica, so it dies with runs in progress; the survivor's retry of it passes.
        fault: (_tag, turn) => (holdTurn2 && turn === 2 ? hang() : null),
      });
      fake.setHandler(model.handler);
      const a = await start('a');
      receiver.mode = 'fail';
      const hook = await a.api.post('/v1/webhooks', { url: receiver.url });
      assert.equal(hook.status, 201);
      receiver.setSecret(hook.body.secret);

      const ids: string[] = [];
      for (const tag of ['wh1', 'wh2', 'wh3']) {
        const s = await a.api.post('/v1/sessions', { input: tagged(tag), tools: ['calculate_sum'] });
        assert.equal(s.status, 201);
        ids.push(s.body.id);
      }
      // The first attempts get 500s; then the endpoint hangs, so an attempt is in flight on the only replica.
      await receiver.until(() => receiver.requests >= 4);
      receiver.mode = 'hang';
      await receiver.until(() => receiver.heldCount >= 1);
      const statuses = await Promise.all(
        ids.map(async (id) => (await a.api.get(`/v1/sessions/${id}`)).body.status),
      );
      assert.ok(statuses.includes('running'), 'the replica dies with runs in progress');
      await a.kill();
      holdTurn2 = false;
      // The endpoint is down (connections reset) while another replica takes the outbox over.
      receiver.mode = 'down';
      const before = receiver.requests;
      const b = await start('b');
      await receiver.until(() => receiver.requests >= before + 2);
      receiver.mode = 'accept';

      for (const id of ids) await b.api.waitStatus(id, 'idle', 60_000);
      const want = new Set<string>();
      for (const id of ids) {
        const events = (await b.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data as Array<{
          id: string;
          type: string;
        }>;
        const statuses = events.filter((e) => e.type === 'session.status');
        assert.ok(statuses.length >= 2, 'running and idle at least');
        for (const e of statuses) want.add(`msg_${id}_${e.id}`);
      }
      await until(
        () => [...want].every((m) => receiver.accepted.some((r) => r.id === m)),
        60_000,
        'every session.status event at the receiver',
        50,
      );
      assert.equal(receiver.invalid, 0, 'every delivery verifies');
      const got = receiver.accepted.map((r) => r.id);
      assert.equal(new Set(got).size, got.length, 'the dedup accepts each id once');
      assert.deepEqual(new Set(got), want, 'nothing else, nothing missing');
      for (const r of receiver.accepted) {
        assert.equal(r.body.type, 'session.status');
        assert.equal(r.id, `msg_${r.body.session_id}_${r.body.id}`);
      }
      // Retries carried the same webhook-id: some message was attempted more than once before it was accepted.
      const log = (await b.api.get(`/v1/webhooks/${hook.body.id}/deliveries?limit=100`)).body.data as Array<{
        message_id: string;
        attempt: number;
        outcome: string;
      }>;
      assert.ok(log.some((e) => e.attempt >= 2 && e.outcome === 'delivered' && want.has(e.message_id)));
      assert.ok(log.some((e) => e.outcome === 'retrying'));
    });
  },
);
