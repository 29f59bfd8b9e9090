/**
 * Action deadlines are swept by Redis's clock, not by the replica's: a replica whose clock is far ahead does not time
 * out (nor warn of) an approval before the `expires_at` the API showed. The skewed replica is a deadline sweeper in
 * this process with the process's Date.now() moved, beside the service's own.
 *
 * And they are written and checked in it: a replica ahead takes an answer to an action still open (no 409
 * `action_timed_out`), and one behind by more than the timeout writes a deadline still to come. There the whole
 * service is the skewed replica: the process's Date.now() is moved and its reckoning of Redis's clock read again,
 * as its boot and each of its sweeps do (src/redis/clock.ts).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { asReplica } from '../helpers/skewed-clock.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { awaitingApproval } from '../helpers/approvals.js';
import { text } from '../fake/script.js';
import { DeadlineSweeper } from '../../src/sessions/deadlines.js';

const SKEW_MS = 10 * 60_000;

describe('action deadlines with a replica whose clock is off', { timeout: 60_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => {
    await h?.close();
  });

  const redisNow = async () => {
    const [s, us] = await h.service.app.redis.time();
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };

  /** A session waiting for the approval of `call` (action_timeout_s 120), and its `expires_at`. */
  async function approval(call: string): Promise<{ id: string; expiresAt: string }> {
    const { id, waiting } = await awaitingApproval(h, call, { action_timeout_s: 120 });
    return { id, expiresAt: waiting.required_action.expires_at as string };
  }

  it('a replica ahead does not time an approval out before its expires_at', async () => {
    const { id, expiresAt } = await approval('toolu_clock');
    // A pass of a second replica's deadline sweep, 10 minutes ahead (past the deadline and its warning by its clock).
    const app = h.service.app;
    await asReplica(h.service.app, SKEW_MS, () =>
      new DeadlineSweeper(app.sessionDeps, app.log, 60_000).sweep(),
    );
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.equal(s.required_action.expires_at, expiresAt);
    const types = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data.map(
      (e: { type: string }) => e.type,
    );
    assert.ok(!types.includes('action.timed_out'), types.join(' '));
    assert.ok(!types.includes('action.expiring'), types.join(' '));
  });
  it('a replica ahead takes a decision on an approval still open', async () => {
    const { id, expiresAt } = await approval('toolu_ahead');
    h.fake.enqueue(text('Sunny.'));
    // 10 minutes ahead, the approval's expires_at (2 minutes from now in Redis's clock) is long past by this clock.
    const decided = await asReplica(h.service.app, SKEW_MS, () =>
      h.api.post(`/v1/sessions/${id}/tool-calls/toolu_ahead`, { decision: 'approve' }),
    );
    assert.equal(decided.status, 202, JSON.stringify(decided.body));
    assert.ok(Date.parse(expiresAt) > (await redisNow()), 'still open in Redis’s clock');
    await h.api.waitStatus(id, 'idle');
    const types = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data.map(
      (e: { type: string }) => e.type,
    );
    assert.ok(!types.includes('action.timed_out'), types.join(' '));
  });

  it('a replica behind by more than the timeout writes a deadline still to come', async () => {
    // The run that asks for the approval runs here, 10 minutes behind (the action_timeout_s is 2 minutes).
    const { id, expiresAt } = await asReplica(h.service.app, -SKEW_MS, () => approval('toolu_behind'));
    const left = Date.parse(expiresAt) - (await redisNow());
    assert.ok(left > 100_000 && left <= 120_000, `expires_at ${expiresAt} is ${left} ms from Redis's now`);
    // A sweep (of any replica) does not time it out.
    const app = h.service.app;
    await new DeadlineSweeper(app.sessionDeps, app.log, 60_000).sweep();
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.equal(s.required_action.expires_at, expiresAt);
    const types = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data.map(
      (e: { type: string }) => e.type,
    );
    assert.ok(!types.includes('action.timed_out'), types.join(' '));
  });
});
