/**
 * A run's claim (acquire-run-4.lua) reads the session with the lease, in one script, at the start of every run. A
 * session's meta hash may hold a pending step of megabytes (its calls' inputs, edited at approval, up to BODY_LIMIT
 * each; its results, up to MAX_TURN_BYTES together): each value a script reads is copied into its Lua while Redis
 * serves no one else, so the claim reads every field but the step's and says whether there is one; the run reads the
 * step with its history (src/engine/run.ts `withStep`). Here on a private Redis: what Redis sends for the claim of a
 * session holding a 3 MB step (INFO's `total_net_output_bytes`: this suite's client is the only one), and that the
 * claim's session is the stored one but its step.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { sessionKeys } from '../../src/store/keys.js';
import { pendingFields } from '../../src/store/pending.js';
import { decodeFields } from '../../src/store/session-state.js';
import { runQueueForSuite } from '../helpers/redis.js';
import { megabyteStep } from '../helpers/pending-step.js';

const ID = 'ses_claimstep';
const TTL_MS = 60_000;
const MB = 1_000_000;

describe("a run's claim reads the session but its pending step", { timeout: 60_000 }, () => {
  const suite = runQueueForSuite();

  const meta = sessionKeys(ID).meta;
  /** Bytes Redis has sent its clients (INFO's own answer included, a few kB). */
  const sent = async () =>
    Number(/total_net_output_bytes:(\d+)/.exec(await suite.redis.info('stats'))?.[1] ?? 0);

  /** A running session's fields as the apply script writes them, the view's and the run's. */
  const fields = {
    id: ID,
    tenant: 'acme',
    status: 'running',
    revision: '12',
    iteration: '3',
    params: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 1024 }),
    tools: JSON.stringify(['lookup', 'fetch']),
    metadata: JSON.stringify({ team: 'blue' }),
    u_in: '120',
    u_st_web_search: '2',
    msg_count: '6',
  };

  it('a session holding a 3 MB step: the claim sends a few kB, the step left out and said to be there', async () => {
    await suite.redis.hset(meta, { ...fields, ...pendingFields(megabyteStep()) });
    assert.ok((await suite.redis.hstrlen(meta, 'pending')) > 2 * MB);
    const before = await sent();
    const claimed = await suite.runs.claim(ID, 'replica-a', TTL_MS);
    const bytes = (await sent()) - before;
    assert.ok(claimed, 'the run holds the lease');
    // Whole, the step's fields were 3 MB (HGETALL's reply, copied into the script and out again).
    assert.ok(bytes < 32_000, `Redis sent ${bytes} bytes for the claim`);
    assert.equal(claimed.stepUnread, true);
    assert.equal(claimed.state.pending, null);
    // Every other field as stored (the fence the claim took included): the session as a read decodes it, but its step.
    const stored = decodeFields(await suite.redis.hgetall(meta));
    assert.ok(stored.pending, 'the step is stored');
    assert.deepEqual(claimed.state, { ...stored, pending: null });
    assert.equal(claimed.fence, 1);
    assert.deepEqual(claimed.state.cost.serverToolUse, { web_search: 2 });
  });

  it('a session without a step: nothing is left out', async () => {
    await suite.redis.hset(meta, { ...fields, ...pendingFields(null) });
    const claimed = await suite.runs.claim(ID, 'replica-a', TTL_MS);
    assert.ok(claimed, 'the run holds the lease');
    assert.equal(claimed.stepUnread, false);
    assert.deepEqual(claimed.state, decodeFields(await suite.redis.hgetall(meta)));
  });

  it('no claim while another holds the lease, nor of a session that is not running', async () => {
    await suite.redis.hset(meta, { ...fields, ...pendingFields(megabyteStep()) });
    assert.ok(await suite.runs.claim(ID, 'replica-a', TTL_MS));
    assert.equal(await suite.runs.claim(ID, 'replica-b', TTL_MS), null);
    await suite.redis.del(sessionKeys(ID).lease);
    await suite.redis.hset(meta, { status: 'requires_action' });
    assert.equal(await suite.runs.claim(ID, 'replica-b', TTL_MS), null);
  });
});
