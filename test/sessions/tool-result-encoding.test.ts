/**
 * A client's tool result checks the step's results against MAX_TURN_BYTES before anything is written
 * (src/sessions/tool-calls.ts `submitResults`). It counted every result of the step by encoding it again (its
 * `tool_result` block: a JSON.stringify of up to MAX_TURN_BYTES) on the event loop, for each result submitted, and
 * twice for one over the bound: ~40 ms of the loop per 4 MB, every tenant's requests waiting. The stored results are
 * now counted by their fields' sizes as read, and a new result is encoded once (its event, the bound and its write).
 * Here the work is counted as the characters JSON.stringify made while one result was submitted, on a private Redis.
 */
import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidRequest } from '../../src/errors.js';
import { putResult } from '../../src/sessions/tool-calls.js';
import type { SessionDeps } from '../../src/sessions/mutate.js';
import { sessionKeys } from '../../src/store/keys.js';
import { pendingFields, resultField, type PendingStep } from '../../src/store/pending.js';
import { SessionStore } from '../../src/store/store.js';
import { Toolbox } from '../../src/toolbox.js';
import { storeRedisForSuite } from '../helpers/redis.js';

const ID = 'ses_resultencoding';
const TENANT = 'acme';
const MB = 1_000_000;

/** The characters JSON.stringify returned while `run` ran (nothing else runs in this process meanwhile). */
async function stringified(run: () => Promise<unknown>): Promise<number> {
  const original = JSON.stringify;
  let chars = 0;
  JSON.stringify = ((...args: Parameters<typeof original>) => {
    const out = original(...args) as string | undefined;
    chars += out?.length ?? 0;
    return out;
  }) as typeof JSON.stringify;
  try {
    await run();
  } finally {
    JSON.stringify = original;
  }
  return chars;
}

describe(
  "a client's tool result does not encode the step's stored results again",
  { timeout: 60_000 },
  () => {
    const suite = storeRedisForSuite();
    let store: SessionStore;
    let deps: SessionDeps;
    let kicks = 0;
    before(() => {
      store = new SessionStore(suite.redis, { eventLogMax: 1000 });
      deps = {
        store,
        engine: { kick: () => void kicks++ },
        serverTools: new Map(),
        toolbox: new Toolbox([]),
      };
    });

    /** Two client calls; the first answered with a 3 MB result (stored in its field), the second waiting. */
    async function seed(): Promise<void> {
      const step: PendingStep = {
        iteration: 1,
        review: false,
        calls: ['toolu_1', 'toolu_2'].map((id) => ({
          id,
          name: 'lookup',
          input: { q: id },
          kind: 'client' as const,
          approval: 'auto' as const,
        })),
      };
      step.calls[0]!.result = { content: 'r'.repeat(3 * MB), is_error: false };
      await suite.redis.hset(sessionKeys(ID).meta, {
        id: ID,
        tenant: TENANT,
        status: 'requires_action',
        revision: '5',
        iteration: '1',
        params: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 1024 }),
        tools: JSON.stringify([{ name: 'lookup', input_schema: { type: 'object' } }]),
        created_at: '1000',
        updated_at: '1000',
        msg_count: '2',
        ...pendingFields(step),
      });
    }

    // The submit that ends the step: its `session.status` event (`running`) carries no results. (One that leaves the
    // step waiting sends every result of it in that event, by contract: spec §4, src/engine/status.ts.)
    it("the step's last result, next to a stored 3 MB one, encodes kilobytes, not the stored result", async () => {
      await seed();
      const kicked = kicks;
      const chars = await stringified(() =>
        putResult(deps, TENANT, ID, 'toolu_2', { content: 'small answer' }),
      );
      // Counted by encoding it again, as each submit did: over 3,000,000.
      assert.ok(chars < 64_000, `JSON.stringify made ${chars} characters`);
      const s = await store.loadFor(TENANT, ID);
      assert.equal(s.status, 'running');
      assert.equal(kicks, kicked + 1, 'the run was kicked');
      assert.deepEqual(
        s.pending?.calls.map((c) => [c.id, c.result?.content.length]),
        [
          ['toolu_1', 3 * MB],
          ['toolu_2', 12],
        ],
      );
      // The new result's field is its block as encoded once, for its event too.
      assert.equal(
        await suite.redis.hget(sessionKeys(ID).meta, resultField('toolu_2')),
        '{"type":"tool_result","tool_use_id":"toolu_2","content":"small answer"}',
      );
    });

    it('a result past MAX_TURN_BYTES with the stored ones is refused, the new one encoded once and no other', async () => {
      await seed();
      const before = await suite.redis.hgetall(sessionKeys(ID).meta);
      // 3 MB stored + 1.2 MB > 4 MiB.
      let refused: unknown;
      const chars = await stringified(() =>
        putResult(deps, TENANT, ID, 'toolu_2', { content: 'x'.repeat(1_200_000) }).catch(
          (err: unknown) => (refused = err),
        ),
      );
      assert.ok(refused instanceof InvalidRequest && refused.code === 'payload_too_large', String(refused));
      // Both the step's results then those as stored were encoded again to be counted: 8,400,000.
      assert.ok(chars < 1_300_000, `JSON.stringify made ${chars} characters`);
      assert.deepEqual(await suite.redis.hgetall(sessionKeys(ID).meta), before, 'nothing written');
      // One that fits next to the stored one (3 MB + 1 MB and their blocks) is taken.
      await putResult(deps, TENANT, ID, 'toolu_2', { content: 'x'.repeat(MB) });
      assert.equal((await store.loadFor(TENANT, ID)).status, 'running');
    });
  },
);
