/**
 * A session's delete gives its bytes back to its tenant's storage count (`t:{tenant}:bytes`, TENANT_MAX_BYTES) exactly
 * once, even when the replica deleting it is SIGKILLed right after the delete's script. The count is in the tenant's
 * hash slot, not the session's, so the script cannot give them back: the process did, after it, and a kill between the
 * two left the count high for ever (the tenant's quota drifting down with each crash). The script now records what it
 * owes (`s:{id}:b`), which another replica's retention sweep gives back when it finishes the delete's mark
 * (`sessions:unindex`); a give-back that runs twice (the process and a sweep) counts once (`t:{tenant}:given`). A
 * proxy in front of Redis forwards the script named and withholds everything after it (test/helpers/redis-proxy.ts),
 * and the replica is killed there.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { serviceKillSuite } from '../helpers/redis-proxy.js';
import { defineLuaCommands } from '../../src/store/lua-commands.js';
import { GIVEN_KEEP_MS, StorageQuota, givenKey } from '../../src/store/storage-quota.js';
import { until } from './chaos-lib.js';

const ENV = { API_KEYS: 'acme:key-a', DEADLINE_SWEEP_MS: '100' };

describe("a session's delete gives its bytes back once", { timeout: 240_000 }, () => {
  const { rig, spawn, doomed } = serviceKillSuite(ENV);

  const used = async () => Number((await rig.r.get('t:{acme}:bytes')) ?? 0);

  /**
   * A replica on the proxy deletes a session first (so Redis has the delete's scripts: the delete below sends each as
   * one EVALSHA, not a NOSCRIPT answer and an EVAL that would be withheld), then creates one and deletes it, the
   * command holding `marker` forwarded and nothing after it; it is killed there. Returns the session, the tenant's
   * count before its create and what its create added.
   */
  async function killedAt(
    marker: (id: string) => string,
  ): Promise<{ id: string; before: number; added: number }> {
    const replica = await doomed();
    const api = replica.service.api.as('key-a');
    const other = await api.post('/v1/sessions', { input: 'warm-up', start: false });
    assert.equal(other.status, 201, JSON.stringify(other.body));
    assert.equal((await api.req('DELETE', `/v1/sessions/${other.body.id}`)).status, 200);
    const before = await used();
    const created = await api.post('/v1/sessions', {
      input: 'hello',
      start: false,
      metadata: { team: 'red' },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const added = (await used()) - before;
    assert.ok(added > 0, 'the create counted its bytes');
    const held = replica.proxy.holdAfter(marker(id));
    const answered = api.req('DELETE', `/v1/sessions/${id}`).catch(() => null);
    await replica.killWhen(held);
    assert.equal(await answered, null, 'the killed replica answered nothing');
    assert.equal(await rig.r.exists(`s:{${id}}`), 0, 'the delete’s script ran');
    return { id, before, added };
  }

  /** A survivor's retention sweep finishes the delete: its mark and its record of the bytes gone. */
  async function survivorSweeps(id: string): Promise<void> {
    const survivor = await spawn('survivor');
    await until(async () => (await rig.r.zcard('sessions:unindex')) === 0, 30_000, 'no delete marked');
    assert.equal(await rig.r.exists(`s:{${id}}:b`), 0, 'the record of the bytes owed is dropped');
    await survivor.kill();
  }

  it('a replica killed right after the delete’s script: a survivor gives the bytes back', async () => {
    // The delete's script names the deleted session's tenant key (`:g`), which nothing before it sends.
    const { id, before, added } = await killedAt((sid) => `s:{${sid}}:g`);
    assert.equal(await used(), before + added, 'the killed replica gave nothing back');
    await survivorSweeps(id);
    assert.equal(await used(), before, 'the count is back to its value before the create');
  });

  it('a replica killed right after the give-back: the sweep’s second give-back counts nothing', async () => {
    // The give-back's script names the tenant's set of deletes given back, which nothing before it sends.
    const { id, before } = await killedAt(() => 't:{acme}:given');
    assert.equal(await used(), before, 'the killed replica gave the bytes back');
    assert.equal(await rig.r.hlen(`s:{${id}}:b`), 1, 'and was killed before dropping its record');
    await survivorSweeps(id);
    assert.equal(await used(), before, 'given back once');
  });

  it('a DELETE returns the count to its value before the create', async () => {
    const svc = await spawn('plain');
    const api = svc.api.as('key-a');
    const before = await used();
    const created = await api.post('/v1/sessions', { input: 'hello', start: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    assert.ok((await used()) > before);
    assert.equal((await api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal(await used(), before);
    assert.equal(await rig.r.exists(`s:{${id}}:b`), 0, 'nothing left owed');
    assert.equal(await rig.r.zcard('sessions:unindex'), 0);
    await svc.kill();
  });

  it('the give-back script counts each delete once, and refuses one too old to tell', async () => {
    const client = new Redis(rig.redis.url, { maxRetriesPerRequest: 1 });
    try {
      defineLuaCommands(client, new URL('../../src/store/lua/', import.meta.url), 'sess');
      const storage = new StorageQuota(client, 0);
      await client.set('t:{lua}:bytes', 1000);
      const now = Date.now();
      assert.equal(await storage.giveBack('lua', 'ses_a', `${now}-0`, 100), true);
      assert.equal(await storage.giveBack('lua', 'ses_a', `${now}-0`, 100), false, 'twice: once');
      assert.equal(await client.get('t:{lua}:bytes'), '900');
      // Another delete of the same id (a deterministic id made again) is another give-back.
      assert.equal(await storage.giveBack('lua', 'ses_a', `${now + 5}-0`, 100), true);
      assert.equal(await client.get('t:{lua}:bytes'), '800');
      // Older than the set keeps: its member may be trimmed, so nothing is given back.
      assert.equal(await storage.giveBack('lua', 'ses_b', `${now - GIVEN_KEEP_MS - 60_000}-0`, 100), false);
      assert.equal(await client.get('t:{lua}:bytes'), '800');
      assert.equal(await client.zcard(givenKey('lua')), 2);
      assert.ok((await client.pttl(givenKey('lua'))) > GIVEN_KEEP_MS, 'the set expires once idle');
      // A member older than the set keeps is trimmed by the next give-back.
      await client.zadd(givenKey('lua'), now - GIVEN_KEEP_MS - 60_000, 'ses_old/1-0');
      assert.equal(await storage.giveBack('lua', 'ses_c', `${now}-0`, 1), true);
      assert.deepEqual(
        (await client.zrange(givenKey('lua'), 0, -1)).sort(),
        [`ses_a/${now + 5}-0`, `ses_a/${now}-0`, `ses_c/${now}-0`].sort(),
      );
    } finally {
      client.disconnect();
    }
  });
});
