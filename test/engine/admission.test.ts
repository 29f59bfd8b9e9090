import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';

const CAP = 2;
const SESSIONS = 6;

/** A gate the fake's turns wait on: they stay in flight until the test opens it (no timing involved). */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { opened, open };
}

/** Polls `read` until `pred` holds (the counters converge while every turn is held at the gate). */
async function until<T>(read: () => Promise<T>, pred: (v: T) => boolean, what: string, timeoutMs = 20_000) {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await read();
    if (pred(last)) return last;
    await new Promise((r) => setImmediate(r));
  }
  throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
}

describe('MAX_ACTIVE_RUNS: runs beyond the cap wait for a slot', () => {
  let h: Harness;
  let inflight = 0;
  let maxInflight = 0;
  let h2: Harness | undefined;
  const readyz = (x: Harness) => async () => (await x.api.get('/readyz')).body;

  before(async () => {
    h = await startHarness({ env: { MAX_ACTIVE_RUNS: String(CAP) } });
  });
  after(async () => {
    await h2?.close();
    await h?.close();
  });

  it('drives at most MAX_ACTIVE_RUNS at once, the others oldest first, and every run completes', async () => {
    const g = gate();
    // The turns in flight at once are the runs driven at once; each stays at the fake until the gate opens.
    h.fake.setHandler(async () => {
      inflight++;
      maxInflight = Math.max(maxInflight, inflight);
      await g.opened;
      inflight--;
      return { type: 'message', content: [{ type: 'text', text: 'done' }] };
    });
    const ids: string[] = [];
    for (let i = 0; i < SESSIONS; i++) {
      const r = await h.api.post('/v1/sessions', { input: `session ${i}` });
      assert.equal(r.status, 201);
      ids.push(r.body.id);
    }
    await h.fake.waitForRequests(CAP, 20_000);
    await until(
      readyz(h),
      (b) => b.active_runs === CAP && b.waiting_runs === SESSIONS - CAP,
      `${CAP} active and ${SESSIONS - CAP} waiting runs`,
    );
    const metrics = String((await h.api.get('/metrics')).body);
    assert.match(metrics, new RegExp(`trs_waiting_runs ${SESSIONS - CAP}\\b`));
    assert.equal(h.fake.requests.length, CAP, 'no turn beyond the cap reached the upstream');
    g.open();

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
    h.fake.requests.length = 0;
    // Fill this replica's slots with two turns held at a gate, then queue one more run here: only another replica
    // can run it while the gate is closed.
    const g = gate();
    h.fake.setHandler(async (req) => {
      if (JSON.stringify(req.messages[0]).includes('long')) await g.opened;
      return { type: 'message', content: [{ type: 'text', text: 'done' }] };
    });
    for (let i = 0; i < CAP; i++) await h.api.post('/v1/sessions', { input: `long ${i}` });
    await h.fake.waitForRequests(CAP, 20_000);
    const waiting = (await h.api.post('/v1/sessions', { input: 'queued' })).body.id as string;
    await until(readyz(h), (b) => b.waiting_runs === 1, 'the queued run waiting here');
    // A second replica on the same Redis claims it from `runs:due` (due 2 s after creation).
    h2 = await startHarness({ redis: h.redis, fakeServer: h.fake });
    const done = await h.api.waitStatus(waiting, ['idle', 'failed'], 30_000);
    assert.equal(done.status, 'idle');
    assert.equal((await readyz(h)()).active_runs, CAP, 'this replica still holds its two gated turns');
    g.open();
    await until(readyz(h2), (b) => b.active_runs === 0, 'the second replica idle');
  });
});
