/**
 * WEBHOOK_SWEEP_GRACE_MS is checked against DELETED_LOG_TTL_MS at boot. The webhooks' sweep delivers what a replica
 * that died before its fan-out wrote (its `session.deleted` among it) WEBHOOK_SWEEP_GRACE_MS after the mark, at its next
 * poll (WEBHOOK_POLL_MS); a deleted session's log, that event in it, expires DELETED_LOG_TTL_MS after the delete. With
 * a grace as long, the sweep found the log gone and the event was never delivered: such a config is refused, naming
 * the three variables.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../../src/config.js';

const refused = (env: Record<string, string>, values: RegExp) =>
  assert.throws(
    () => loadConfig(env),
    (err: unknown) =>
      err instanceof ConfigError &&
      /WEBHOOK_SWEEP_GRACE_MS: .*WEBHOOK_POLL_MS .*must be below DELETED_LOG_TTL_MS/.test(err.message) &&
      values.test(err.message),
  );

test('a webhook sweep grace that a deleted log would not outlive is refused at boot', () => {
  // The defaults: 30 s + 0.5 s, below 60 s.
  const config = loadConfig({});
  assert.equal(config.WEBHOOK_SWEEP_GRACE_MS + config.WEBHOOK_POLL_MS < config.DELETED_LOG_TTL_MS, true);
  refused({ WEBHOOK_SWEEP_GRACE_MS: '60000' }, /60000 plus WEBHOOK_POLL_MS \(500\).*\(60000\)/);
  refused({ WEBHOOK_SWEEP_GRACE_MS: '90000' }, /90000/);
  // The poll counts: the sweep comes at most one poll after the grace.
  refused({ WEBHOOK_SWEEP_GRACE_MS: '59500' }, /59500 plus WEBHOOK_POLL_MS \(500\)/);
  refused({ WEBHOOK_SWEEP_GRACE_MS: '20000', DELETED_LOG_TTL_MS: '5000' }, /\(5000\)/);
  assert.equal(loadConfig({ WEBHOOK_SWEEP_GRACE_MS: '59499' }).WEBHOOK_SWEEP_GRACE_MS, 59_499);
  assert.equal(
    loadConfig({ WEBHOOK_SWEEP_GRACE_MS: '1000', WEBHOOK_POLL_MS: '50', DELETED_LOG_TTL_MS: '2000' })
      .DELETED_LOG_TTL_MS,
    2000,
  );
});
