/**
 * A record given up while Redis is paused (`IdempotencyRecords.giveUp`) stays given up until Redis answers again,
 * however long after its lease that is: the retry then takes the key, it is not refused 409 for another lease.
 * Seen in CI (test/durability/durability-idempotency.test.ts, a starved machine): the drops were tried only for one
 * lease after the give-up, while a paused Redis expires nothing and runs what was sent to it once the pause ends, so
 * the record (its reservation, sent into the pause) outlived them and nobody dropped it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { StoreUnavailable } from '../../src/errors.js';
import { COMMAND_TIMEOUT_MS, createRedis } from '../../src/plugins/redis.js';
import { guardRedis, type RedisGuard } from '../../src/redis/health.js';
import { IdempotencyRecords, type IdempotencyRecord } from '../../src/store/idempotency.js';
import type { RedisClient } from '../../src/store/lua-commands.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';

/** The lease here (IN_FLIGHT_TTL_MS is 10 s): what matters is that the pause outlasts it. */
const LEASE_MS = 2000;
/**
 * The reservation is sent into the pause and times out (COMMAND_TIMEOUT_MS): the give-up follows it, and Redis
 * answers again a whole lease later, plus slack.
 */
const PAUSE_MS = COMMAND_TIMEOUT_MS + LEASE_MS + 2000;

describe('a record given up while Redis is paused', () => {
  let server: TestRedis;
  let client: RedisClient;
  let admin: Redis;
  let guard: RedisGuard;
  /** Resolvers of the waits for the guard's "answers again". */
  const onUp: Array<() => void> = [];

  before(async () => {
    server = await startTestRedis({ appendonly: false });
    // The service's client: the store boundary (StoreUnavailable) and the health probe's guard.
    client = createRedis({ url: server.url }) as RedisClient;
    guard = guardRedis(client, {
      onCommandTimeout: () => {},
      onChange: (down) => {
        if (!down) for (const resolve of onUp.splice(0)) resolve();
      },
    });
    await client.ping();
    admin = new Redis(server.url);
  });
  after(async () => {
    await admin.call('CLIENT', 'UNPAUSE').catch(() => {});
    guard.stop();
    client.disconnect();
    admin.disconnect();
    await server.stop();
  });

  it(
    'is dropped or taken over once Redis answers, more than a lease after the give-up',
    { timeout: PAUSE_MS + 10_000 },
    async () => {
      const records = new IdempotencyRecords(client, 86_400, 67_108_864, LEASE_MS);
      const key = records.key('t', 'paused-give-up');
      const first: IdempotencyRecord = { state: 'pending', fp: 'fp', owner: 'first' };
      assert.equal(await admin.call('CLIENT', 'PAUSE', String(PAUSE_MS), 'ALL'), 'OK');
      const pausedAt = Date.now();
      // As src/plugins/idempotency.ts does: the reservation, sent into the pause, times out (its effect unknown: the
      // paused Redis runs it when the pause ends, a lease from then), and is given up.
      await assert.rejects(records.reserve(key, first), StoreUnavailable);
      records.giveUp(key, 'first');
      assert.ok(guard.down, 'the guard refuses commands: the drops fail at once while Redis is paused');
      const up = new Promise<void>((resolve) => onUp.push(resolve));
      await up;
      assert.ok(
        Date.now() - pausedAt >= COMMAND_TIMEOUT_MS + LEASE_MS,
        'Redis answers again more than a lease after the give-up',
      );
      // The client's retry, on this replica, as soon as Redis answers: the first request's record (written as the
      // pause ended) is still there unless the give-up's drop landed first; either way the retry takes the key.
      const retry: IdempotencyRecord = { state: 'pending', fp: 'fp', owner: 'retry' };
      assert.equal(await records.reserve(key, retry), true, 'the retry takes the key, not 409');
      assert.equal((await records.get(key))?.owner, 'retry');
    },
  );
});
