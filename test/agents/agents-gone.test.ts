/**
 * A tree member whose delete died between its delete script and its run's end (the step that wakes the member) is
 * still woken: the runs' sweep, finding the session's due entry, ends the run again without its tenant (its meta is
 * gone), and the tree's own data tells the tenant; a member of the old single set (`agents:due`, a rolling upgrade)
 * is woken there, as the version that wrote it did. Before, the member waited for its next look (an hour for an idle
 * one), and so did the deletes of its own children.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LEGACY_AGENTS_DUE_KEY, treeDueKey } from '../../src/store/tree-due.js';
import { harnessWithoutSweep, recordedSweep, writerWithResearcher } from '../helpers/agents.js';
import type { Harness } from '../helpers/service.js';

const AN_HOUR_AWAY = () => Date.now() + 30 * 60_000;
/**
 * Woken: due now, not a look's minute or hour away. A wake-up's score is Redis's TIME to the microsecond
 * (tree-due-3.lua), or in the old set the process's reckoning of it plus a fraction under 1 (tree-due.ts
 * `oldWakeScore`), which may be a millisecond or so off this host's clock.
 */
const wokenBy = (score: string | null) => score !== null && Number(score) < Date.now() + 1_000;

describe('a tree member whose delete died before its run ended', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await harnessWithoutSweep();
  });
  after(() => h.close());

  /** A pass of a sweep whose looks are recorded: the members it looked at. */
  async function recordedPass(): Promise<string[]> {
    const { looked, pass } = recordedSweep(h.service.app);
    await pass();
    return looked;
  }

  /** An idle root of tenant a, looked at once: its next look is an hour away. */
  async function idleMember(): Promise<string> {
    const { app } = h.service;
    const created = await h.api.as('key-a').post('/v1/sessions', { ...writerWithResearcher, start: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    await app.store.runs.end(id, 'a');
    assert.ok((await recordedPass()).includes(id));
    assert.ok(Number(await app.redis.zscore(treeDueKey('a'), id)) > AN_HOUR_AWAY());
    return id;
  }

  /**
   * The session is deleted while running, and the process dies between the delete's script and its runs.end (as if
   * killed there): its run's due entry is left, which the runs' sweep then finds.
   */
  async function deletedBeforeItsEnd(id: string): Promise<void> {
    const { app } = h.service;
    const { runs } = app.store;
    const end = runs.end.bind(runs);
    runs.end = () => Promise.reject(new Error('killed before the run ended'));
    try {
      const s = await app.store.load(id);
      await assert.rejects(app.store.destroy(id, 'a', s!.createdAt), /killed/);
    } finally {
      runs.end = end;
    }
    assert.equal(await app.store.load(id), null);
    await runs.keep({ id, fence: 0, tenant: null }, 0);
  }

  const runsSweep = () =>
    h.service.app.store.runs.sweep(
      10,
      () => false,
      (sid) => h.service.app.store.load(sid),
    );

  it("is woken by the runs' sweep, and its look drops it", async () => {
    const { app } = h.service;
    const id = await idleMember();
    const due = () => app.redis.zscore(treeDueKey('a'), id);
    await deletedBeforeItsEnd(id);
    assert.ok(Number(await due()) > AN_HOUR_AWAY(), 'not woken by the delete');
    assert.deepEqual(await runsSweep(), []);
    assert.ok(wokenBy(await due()), `woken (${await due()})`);
    assert.ok((await recordedPass()).includes(id));
    assert.equal(await due(), null, 'dropped by its look');
    assert.equal(await app.redis.hget('{agents}:tenant-of', id), null, 'its tenant kept no longer');
  });

  it("a member of the old single set is woken there by the runs' sweep", async () => {
    const { app } = h.service;
    const id = await idleMember();
    // As a replica of the version before wrote it: in `agents:due` only (so with no tenant kept), an hour away.
    await app.redis.zrem(treeDueKey('a'), id);
    await app.redis.hdel('{agents}:tenant-of', id);
    await app.redis.zadd(LEGACY_AGENTS_DUE_KEY, Date.now() + 3_600_000, id);
    await deletedBeforeItsEnd(id);
    const due = () => app.redis.zscore(LEGACY_AGENTS_DUE_KEY, id);
    assert.deepEqual(await runsSweep(), []);
    assert.ok(wokenBy(await due()), `woken (${await due()})`);
    assert.ok((await recordedPass()).includes(id));
    assert.equal(await due(), null, 'dropped by its look');
  });

  it("with Redis full, the runs' sweep still ends a gone session's run (its wake-up refused) and goes on", async () => {
    const { app } = h.service;
    const id = await idleMember();
    await deletedBeforeItsEnd(id);
    // maxmemory under what is used (noeviction): every ZADD is refused, the ZREMs that end the run are not.
    const used = Number(/used_memory:(\d+)/.exec(await app.redis.info('memory'))![1]);
    await app.redis.config('SET', 'maxmemory-policy', 'noeviction');
    await app.redis.config('SET', 'maxmemory', String(Math.max(1, Math.floor(used / 2))));
    try {
      await assert.rejects(app.redis.zadd('junk', 1, 'j'), (err: Error) => /OOM/.test(String(err.cause)));
      assert.deepEqual(await runsSweep(), []);
      assert.equal(await app.redis.zscore('runs:due', id), null, 'its due entry dropped');
    } finally {
      await app.redis.config('SET', 'maxmemory', '0');
    }
  });
});
