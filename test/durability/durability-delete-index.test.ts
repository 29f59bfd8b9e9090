/**
 * A session's index entries (its tenant index's, `t:{tenant}:sessions`, and its metadata pairs', `t:{tenant}:md:*`)
 * are dropped even when the replica deleting it is SIGKILLed right after the delete's script. They live in the
 * tenant's hash slot, not the session's, so the script cannot drop them; they were dropped by the process after it,
 * and a kill between the two left them for ever (no expiry; a metadata pair's only when a list filtered on that pair
 * paged past them). The delete now names them in a mark first (`sessions:unindex`), which another replica's retention
 * sweep finishes. Both deletes: a client's DELETE and the expiry sweep's. A proxy in front of Redis forwards the
 * delete's script and withholds everything after it (test/helpers/redis-proxy.ts), and the replica is killed there.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { serviceKillSuite } from '../helpers/redis-proxy.js';
import type { ServiceProcess } from '../helpers/process.js';
import { until } from './chaos-lib.js';

const ENV = { API_KEYS: 'acme:key-a', DEADLINE_SWEEP_MS: '100' };
const METADATA = { team: 'red', job: 'nightly', n: 5 };

describe("a session's delete killed right after its script", { timeout: 240_000 }, () => {
  const { rig, spawn, doomed } = serviceKillSuite(ENV);

  /** The index entries of session `id`: the keys of the tenant's indexes that hold it. */
  async function entriesOf(id: string): Promise<string[]> {
    const keys = [
      't:{acme}:sessions',
      ...(await rig.r.keys('t:{acme}:md:*')).filter((k) => /^t:\{acme\}:md:[0-9a-f]{32}$/.test(k)),
    ];
    const held: string[] = [];
    for (const key of keys)
      if ((await rig.r.zrange(key, 0, -1)).some((m) => m.endsWith(`:${id}`))) held.push(key);
    return held.sort();
  }

  /**
   * A replica on the proxy creates a session with METADATA (`ttl_s` when given) and deletes another (so Redis has the
   * delete's script: the delete below is one EVALSHA, not a NOSCRIPT answer and an EVAL that would be withheld);
   * `act` makes it delete the session, whose script lands and nothing after it; it is killed. Returns the session's
   * id, and the keys that held its entries before the delete.
   */
  async function killedAfterDelete(
    ttl: number | null,
    act: (api: ServiceProcess['api'], id: string) => Promise<unknown>,
  ): Promise<{ id: string; indexed: string[] }> {
    const replica = await doomed();
    const api = replica.service.api.as('key-a');
    const other = await api.post('/v1/sessions', { start: false });
    assert.equal(other.status, 201, JSON.stringify(other.body));
    assert.equal((await api.req('DELETE', `/v1/sessions/${other.body.id}`)).status, 200);
    const created = await api.post('/v1/sessions', {
      input: 'hello',
      start: false,
      metadata: METADATA,
      ...(ttl === null ? {} : { ttl_s: ttl }),
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const indexed = await entriesOf(id);
    assert.equal(indexed.length, 4, 'the tenant index and one index per pair');
    // The delete's script names the deleted session's tenant key (`:g`), which nothing before it sends.
    const held = replica.proxy.holdAfter(`s:{${id}}:g`);
    void act(api, id).catch(() => undefined);
    await replica.killWhen(held);
    assert.equal(await rig.r.exists(`s:{${id}}`), 0, 'the delete’s script ran');
    assert.deepEqual(await entriesOf(id), indexed, 'the killed replica dropped none of its index entries');
    return { id, indexed };
  }

  /** A survivor's retention sweep drops the entries the killed replica left, and the delete's mark. */
  async function survivorRepairs(id: string): Promise<void> {
    const survivor = await spawn('survivor');
    await until(async () => (await entriesOf(id)).length === 0, 30_000, `no index entry of ${id}`);
    await until(async () => (await rig.r.zcard('sessions:unindex')) === 0, 10_000, 'no delete marked');
    const listed = await survivor.api.as('key-a').get('/v1/sessions?metadata.team=red&metadata.n=5');
    assert.equal(listed.status, 200, JSON.stringify(listed.body));
    assert.deepEqual(listed.body.data, []);
    // Gone before the next case's replica: its sweeps would take that case's expiry.
    await survivor.kill();
  }

  it('a DELETE', async () => {
    const { id } = await killedAfterDelete(null, (api, sid) => api.req('DELETE', `/v1/sessions/${sid}`));
    await survivorRepairs(id);
  });

  it('the expiry sweep', async () => {
    // The doomed replica's own retention sweep deletes it once its TTL is over.
    const { id } = await killedAfterDelete(1, async () => undefined);
    await survivorRepairs(id);
  });
});
