/**
 * Boot-time loads (the webhook interest) are tried again while the store is unavailable, for a bounded time: a Redis
 * that stalls for a moment past the health probe must not fail a replica's boot (seen in CI: a replica exited with
 * "webhook interest reload failed … command not sent" while Redis caught up with a slow disk).
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StoreUnavailable } from '../../src/errors.js';
import { retryWhileUnavailable } from '../../src/store/unavailable.js';

const down = () => new StoreUnavailable(new Error('Redis is not answering (health probe); command not sent'));

describe('retryWhileUnavailable', () => {
  it('tries again while the store is unavailable and returns the first answer', async () => {
    let calls = 0;
    const retried: StoreUnavailable[] = [];
    const out = await retryWhileUnavailable(
      async () => {
        calls++;
        if (calls < 3) throw down();
        return 'loaded';
      },
      10_000,
      (err) => retried.push(err),
    );
    assert.equal(out, 'loaded');
    assert.equal(calls, 3);
    assert.equal(retried.length, 2);
  });

  it('throws any other error at once', async () => {
    let calls = 0;
    await assert.rejects(
      retryWhileUnavailable(
        async () => {
          calls++;
          throw new TypeError('a bug');
        },
        10_000,
        () => assert.fail('not retried'),
      ),
      TypeError,
    );
    assert.equal(calls, 1);
  });

  it('gives up after its time with the store error', async () => {
    let calls = 0;
    await assert.rejects(
      retryWhileUnavailable(
        async () => {
          calls++;
          throw down();
        },
        300,
        () => {},
      ),
      StoreUnavailable,
    );
    assert.ok(calls >= 2 && calls <= 4, `${calls} calls`);
  });
});
