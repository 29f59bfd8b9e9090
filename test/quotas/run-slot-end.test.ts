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

  /** A new session of the tenant (201), started unless `start: false`. */
  async function created(body: Record<string, unknown>): Promise<string> {
    const made = await h.api.post('/v1/sessions', body);
    assert.equal(made.status, 201, JSON.stringify(made.body));
    return made.body.id as string;
  }

  /**
   * Each way a run ends with a commit that bills a turn: `run` starts it (the records are held from then on) and
   * answers the session's id; `ended` tells the session as that end shows it.
   */
  const shapes: Array<{ end: string; run: () => Promise<string>; ended: (s: any) => boolean }> = [
    {
      end: 'idle after its reply',
      run: () => created({ input: 'Hi.' }),
      ended: (s) => s.status === 'idle',
    },
    {
      // pause_after_turn: the reply and the review step in one commit that bills the turn (src/engine/review-turn.ts).
      end: 'requires_action at a review',
      run: () => created({ input: 'Hi.', pause_after_turn: true }),
      ended: (s) => s.status === 'requires_action',
    },
    {
      // A run that only compacts (src/engine/compaction-run.ts): its summary's commit bills the request.
      end: 'idle after a compaction of its own',
      run: async () => {
        const id = await created({
          start: false,
          messages: [
            { role: 'user', content: 'Hi.' },
            { role: 'assistant', content: 'Hello.' },
          ],
        });
        assert.equal((await h.api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
        return id;
      },
      ended: (s) => s.status === 'idle' && s.compactions === 1 && !s.compaction_pending,
    },
  ];
  for (const shape of shapes) {
    it(`ended ${shape.end}: another session of the tenant starts at once`, async () => {
      h.fake.enqueue(text('Done.', USED));
      const records = holdRecords();
      try {
        const id = await shape.run();
        await records.held;
        const seen = await h.api.waitFor(id, (s) => shape.ended(s) || s.status === 'failed');
        assert.ok(shape.ended(seen), JSON.stringify(seen));
        const run = h.service.app.engine.runHere(id);
        assert.ok(run, "the first run is still in this process: its last turn's record is held");
        // The record is still held: the slot went back alongside it.
        h.fake.enqueue(text('Second.', USED));
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
