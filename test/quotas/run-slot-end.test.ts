/**
 * A run's end gives back its tenant's run slot (TENANT_MAX_ACTIVE_RUNS) alongside the record of its last turn's
 * spend, not after it (src/engine/commit.ts `commit`'s `alongside`): a client that saw a session leave `running` and
 * starts another run of the tenant at once is not refused for a slot held only while the record is on its way. The
 * record is held here (the store's `recordOpen` waits on a gate) so the window is as wide as the test wants: with the
 * slot given back after the record, the second create is refused 429 while the first session already shows its end.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { text } from '../fake/script.js';
import { startHarness, type Harness } from '../helpers/service.js';

const TENANT = 'tse';
const USED = { usage: { input_tokens: 100, output_tokens: 10 } };

describe("a run's end gives its run slot back while its last turn's record is still on its way", () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `${TENANT}:key-${TENANT}`, TENANT_MAX_ACTIVE_RUNS: '1' } });
  });
  after(async () => {
    await h?.close();
  });
  beforeEach(() => h.fake.reset());

  /** Holds every record of open spend (the store's `recordOpen`) until `open()`; `held` settles at the first. */
  function holdRecords() {
    const spend = h.service.app.store.spend;
    const original = spend.recordOpen;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let reached!: () => void;
    const held = new Promise<void>((resolve) => (reached = resolve));
    spend.recordOpen = async (tenant, session, entries) => {
      reached();
      await gate;
      return original.call(spend, tenant, session, entries);
    };
    return {
      held,
      open: () => {
        spend.recordOpen = original;
        open();
      },
    };
  }

  const shapes = [
    { end: 'idle', first: text('Done.', USED), body: { input: 'Hi.' } },
    // pause_after_turn: the reply and the review step in one commit that bills the turn (src/engine/review-turn.ts).
    { end: 'requires_action', first: text('Done.', USED), body: { input: 'Hi.', pause_after_turn: true } },
  ] as const;
  for (const shape of shapes) {
    it(`ended ${shape.end}: another session of the tenant starts at once`, async () => {
      h.fake.enqueue(shape.first);
      h.fake.enqueue(text('Second.', USED));
      const records = holdRecords();
      try {
        const first = await h.api.post('/v1/sessions', shape.body);
        assert.equal(first.status, 201, JSON.stringify(first.body));
        const id = first.body.id as string;
        await records.held;
        const seen = await h.api.waitStatus(id, [shape.end, 'failed']);
        assert.equal(seen.status, shape.end, JSON.stringify(seen.error));
        const run = h.service.app.engine.runHere(id);
        assert.ok(run, "the first run is still in this process: its last turn's record is held");
        // The record is still held: the slot went back alongside it.
        const second = await h.api.post('/v1/sessions', { input: 'Next.' });
        assert.equal(second.status, 201, JSON.stringify(second.body));
        records.open();
        await run.done;
        assert.equal((await h.api.waitStatus(second.body.id as string, ['idle', 'failed'])).status, 'idle');
      } finally {
        records.open();
      }
    });
  }
});
