/**
 * The store boundary's commands that ioredis sends on its own after a reconnect (the subscriptions, `select`) leave
 * no unhandled rejection when the connection is lost again before they are answered (seen once in CI: a subscriber
 * reconnecting as the service closed; ioredis drops the promise of its own re-subscribe). A caller that awaits one
 * still gets its `StoreUnavailable`.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StoreUnavailable } from '../../src/errors.js';
import { StoreRedis } from '../../src/store/unavailable.js';

describe('a subscription command whose connection closes before its answer', () => {
  it('rejects the caller that awaits it with StoreUnavailable, and one dropped by its sender is not unhandled', async () => {
    // Nothing listens on port 1: the commands wait in the offline queue until the client gives up.
    const client = new StoreRedis({
      port: 1,
      host: '127.0.0.1',
      lazyConnect: true,
      retryStrategy: () => null,
    });
    client.on('error', () => {});
    const unhandled: unknown[] = [];
    const onUnhandled = (err: unknown) => unhandled.push(err);
    process.on('unhandledRejection', onUnhandled);
    try {
      const awaited = client.subscribe('channel-a');
      // As ioredis's ready handler does after a reconnect: the promise is dropped.
      void client.subscribe('channel-b');
      void client.psubscribe('pattern-*');
      client.disconnect();
      await assert.rejects(awaited, (err: unknown) => err instanceof StoreUnavailable);
      // Past the turns in which a rejection without a handler is reported.
      for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });
});
