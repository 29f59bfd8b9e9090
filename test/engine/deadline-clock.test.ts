/**
 * Action deadlines are swept by Redis's clock, not by the replica's: a replica whose clock is far ahead does not time
 * out (nor warn of) an approval before the `expires_at` the API showed. The skewed replica is a deadline sweeper in
 * this process with the process's Date.now() moved, beside the service's own.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { toolCall } from '../fake/script.js';
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

  /** Runs `fn` with this process's Date.now() moved by `skew` ms (restored after). */
  async function skewed<T>(skew: number, fn: () => Promise<T>): Promise<T> {
    const real = Date.now;
    Date.now = () => real() + skew;
    try {
      return await fn();
    } finally {
      Date.now = real;
    }
  }

  it('a replica ahead does not time an approval out before its expires_at', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Oslo' }, { id: 'toolu_clock' }));
    const created = await h.api.post('/v1/sessions', {
      input: 'Weather in Oslo?',
      tools: ['get_weather'],
      approval: 'always',
      action_timeout_s: 120,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const waiting = await h.api.waitStatus(id, 'requires_action');
    const expiresAt = waiting.required_action.expires_at as string;
    // A pass of a second replica's deadline sweep, 10 minutes ahead (past the deadline and its warning by its clock).
    const app = h.service.app;
    await skewed(SKEW_MS, () => new DeadlineSweeper(app.sessionDeps, app.log, 60_000).sweep());
    const s = (await h.api.get(`/v1/sessions/${id}`)).body;
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.equal(s.required_action.expires_at, expiresAt);
    const types = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data.map(
      (e: { type: string }) => e.type,
    );
    assert.ok(!types.includes('action.timed_out'), types.join(' '));
    assert.ok(!types.includes('action.expiring'), types.join(' '));
  });
});
