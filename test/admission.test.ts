import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from './helpers/service.js';

const CAP = 2;
const SESSIONS = 6;
const TURN_MS = 150;

describe('MAX_ACTIVE_RUNS: runs beyond the cap wait for a slot', () => {
  let h: Harness;
  let inflight = 0;
  let maxInflight = 0;
  let h2: Harness | undefined;

  before(async () => {
    h = await startHarness({ env: { MAX_ACTIVE_RUNS: String(CAP) } });
    // Each turn stays at the fake for TURN_MS: the turns in flight at once are the runs driven at once.
    h.fake.setHandler(async () => {
      inflight++;
      maxInflight = Math.max(maxInflight, inflight);
      await new Promise((r) => setTimeout(r, TURN_MS));
      inflight--;
      return { type: 'message', content: [{ type: 'text', text: 'done' }] };
    });
  });
  after(async () => {
    await h2?.close();
    await h?.close();
  });

  it('drives at most MAX_ACTIVE_RUNS at once, the others oldest first, and every run completes', async () => {
    const ids: string[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const r = await h.api.post('/v1/sessions', { input: `session ${i}` });
      assert.equal(r.status, 201);
      ids.push(r.body.id);
    }
    const ready = await h.api.get('/readyz');
    assert.equal(ready.body.active_runs, CAP);
    assert.equal(ready.body.waiting_runs, SESSIONS - CAP);
    const metrics = String((await h.api.get('/metrics')).body);
    assert.match(metrics, new RegExp(`trs_waiting_runs ${SESSIONS - CAP}\\b`));

    for (const id of ids)
      assert.equal((await h.api.waitStatus(id, ['idle', 'failed'], 20_000)).status, 'idle');
    assert.equal(maxInflight, CAP, 'the cap was reached and never passed');
    // First come, first served: the fake saw the sessions' turns in creation order.
    const order = h.fake.requests.map((r) => JSON.stringify(r.messages[0]));
    assert.deepEqual(
      order,
      ids.map((_, i) => JSON.stringify({ role: 'user', content: [{ type: 'text', text: `session ${i}` }] })),
    );
  });

  it('a run waiting on a full replica is taken by another replica with room once due', async () => {
    maxInflight = 0;
    h.fake.requests.length = 0;
    // Fill this replica's slots with two long turns, then queue one more run here.
    h.fake.setHandler(async (req) => {
      inflight++;
      maxInflight = Math.max(maxInflight, inflight);
      const long = JSON.stringify(req.messages[0]).includes('long');
      await new Promise((r) => setTimeout(r, long ? 6000 : TURN_MS));
      inflight--;
      return { type: 'message', content: [{ type: 'text', text: 'done' }] };
    });
    for (let i = 0; i < CAP; i++) await h.api.post('/v1/sessions', { input: `long ${i}` });
    const waiting = (await h.api.post('/v1/sessions', { input: 'queued' })).body.id as string;
    assert.equal((await h.api.get('/readyz')).body.waiting_runs, 1);
    // A second replica on the same Redis claims it from `runs:due` (due 2 s after creation), well before a slot
    // frees here.
    h2 = await startHarness({ redis: h.redis, fakeServer: h.fake });
    const t0 = Date.now();
    const done = await h.api.waitStatus(waiting, ['idle', 'failed'], 10_000);
    assert.equal(done.status, 'idle');
    assert.ok(Date.now() - t0 < 5000, `taken over after ${Date.now() - t0} ms`);
    assert.equal((await h2.api.get('/readyz')).body.active_runs, 0);
  });
});
