/**
 * The agents' sweep is shared by every tenant's sub-agent trees; a burst of one tenant's tree members due at once
 * (many children ending together) must not hold back another tenant's tree until the burst is looked at. A pass takes
 * every due tenant's members round robin (src/store/tree-due.ts). Members written by a replica of the version that
 * kept them all in one set (`agents:due`: a rolling upgrade) are still looked at, and moved into their tenant's set.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LEGACY_AGENTS_DUE_KEY, treeDueKey } from '../../src/store/tree-due.js';
import {
  harnessWithoutSweep,
  recordedSweep as recordedSweepOf,
  writerWithResearcher,
} from '../helpers/agents.js';
import type { Api, Harness } from '../helpers/service.js';

/** More than one pass takes (50). */
const BURST = 120;

describe("the agents' sweep across tenants", { timeout: 120_000 }, () => {
  let h: Harness;
  let a: Api;
  let b: Api;
  before(async () => {
    // The service's own sweep stays out: the test runs one pass and sees what it looked at.
    h = await harnessWithoutSweep();
    a = h.api.as('key-a');
    b = h.api.as('key-b');
  });
  after(() => h.close());

  const recordedSweep = () => recordedSweepOf(h.service.app);

  /** A tree's root, made idle (a member looked at a minute from now), then woken as a run's end wakes it. */
  async function wokenRoot(api: Api, tenant: string): Promise<string> {
    const created = await api.post('/v1/sessions', { ...writerWithResearcher, start: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const { app } = h.service;
    // Due at once: its score is Redis's TIME to the microsecond (tree-due-3.lua), which a pass compares with.
    await app.store.runs.end(created.body.id, tenant);
    return created.body.id;
  }

  it("one pass looks at another tenant's member however many of one tenant's came first", async () => {
    const burst: string[] = [];
    for (let i = 0; i < BURST; i++) burst.push(await wokenRoot(a, 'a'));
    const other = await wokenRoot(b, 'b');
    const { looked, pass } = recordedSweep();
    await pass();
    assert.ok(
      looked.includes(other),
      `tenant b's member looked at in the first pass (${looked.length} looks)`,
    );
    const ofBurst = new Set(burst);
    assert.ok(looked.filter((id) => ofBurst.has(id)).length < BURST, 'the burst takes more than one pass');
    // Every member is looked at in the end, and moved on (an idle root: an hour away).
    for (let i = 0; i < 5 && new Set(looked).size < BURST + 1; i++) await pass();
    assert.deepEqual(new Set(looked), new Set([...burst, other]));
    const score = Number(await h.service.app.redis.zscore(treeDueKey('a'), burst[0]!));
    assert.ok(score > Date.now() + 30 * 60_000, String(score));
  });

  it('a member the old single set holds is looked at and moved into its tenant set', async () => {
    const { app } = h.service;
    const id = await wokenRoot(b, 'b');
    // As a replica of the version before wrote it: in `agents:due` only, due now.
    await app.redis.zrem(treeDueKey('b'), id);
    await app.redis.zadd(LEGACY_AGENTS_DUE_KEY, Date.now() - 1, id);
    const { looked, pass } = recordedSweep();
    await pass();
    assert.ok(looked.includes(id));
    assert.equal(await app.redis.zscore(LEGACY_AGENTS_DUE_KEY, id), null, 'gone from the old set');
    const score = Number(await app.redis.zscore(treeDueKey('b'), id));
    assert.ok(score > Date.now() + 30 * 60_000, `in its tenant's set, an hour away (${score})`);
    // Its tenant's set wakes it as a run's end does.
    await app.store.runs.end(id, 'b');
    assert.ok(Number(await app.redis.zscore(treeDueKey('b'), id)) < Date.now() + 1);
  });
});
