/**
 * A turn's spend reaches its tenant's day (`GET /v1/usage`) exactly once when its session is deleted between the
 * commit that billed it and the record of it. The commit marks the spend open in the session's meta hash
 * (`spend_open`), which a delete deletes: the delete's script carries the mark into its record of what it owes
 * (`s:{id}:b`, destroy-11.lua), the delete records it (record-2.lua, once per seq) and a survivor's retention sweep
 * does should the deleting process die first. Each case kills (or holds) a replica on a proxy at a chosen command
 * (test/helpers/redis-proxy.ts), as durability-spend-kill and durability-delete-bytes do. The lease TTL is long, so
 * no survivor claims or sweeps the killed run (whose claim or sweep would record the mark) before the delete.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { serviceKillSuite } from '../helpers/redis-proxy.js';
import { RECORD, today, used, type Usage } from '../helpers/spend-turns.js';
import type { ServiceProcess } from '../helpers/process.js';
import { decodeGiveBack } from '../../src/store/storage-quota.js';
import { text } from '../fake/script.js';
import { until } from './chaos-lib.js';

const TENANTS = ['t1', 't2', 't3', 't4', 't5'];
const ENV = {
  API_KEYS: TENANTS.map((t) => `${t}:key-${t}`).join(','),
  LEASE_TTL_MS: '60000',
  DEADLINE_SWEEP_MS: '100',
};
const FIELDS: Array<keyof Usage> = [
  'input_tokens',
  'output_tokens',
  'cache_creation_input_tokens',
  'cache_read_input_tokens',
];
/** `u`'s token counts alone. */
const tokens = (u: Usage): Usage => ({
  input_tokens: u.input_tokens,
  output_tokens: u.output_tokens,
  cache_creation_input_tokens: u.cache_creation_input_tokens,
  cache_read_input_tokens: u.cache_read_input_tokens,
});

describe("a turn's spend when its session is deleted before the record", { timeout: 240_000 }, () => {
  const { rig, spawn, doomed } = serviceKillSuite(ENV);

  /**
   * A replica on a proxy runs one turn of a session of `tenant`, its record held (`at`: before it runs; `after`: once
   * it ran, what follows held). Returns the session's id, the replica and its proxy (the caller kills or releases).
   */
  async function heldAtRecord(tenant: string, at: 'at' | 'after', i: number) {
    const replica = await doomed(`run-${tenant}`);
    rig.fake.enqueue(text('Hello.', used(i)));
    const held = at === 'at' ? replica.proxy.holdAt(RECORD) : replica.proxy.holdAfter(RECORD);
    const created = await replica.service.api.as(`key-${tenant}`).post('/v1/sessions', { input: 'hi' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await held;
    return { id: created.body.id as string, replica, held };
  }

  /** `heldAtRecord`, the replica killed there. */
  async function killedAtRecord(tenant: string, at: 'at' | 'after', i: number): Promise<string> {
    const { id, replica, held } = await heldAtRecord(tenant, at, i);
    await replica.killWhen(held);
    return id;
  }

  /** The tenant's day as GET /v1/usage answers it. */
  async function day(api: ServiceProcess['api'], tenant: string): Promise<Usage> {
    const res = await api.as(`key-${tenant}`).get(`/v1/usage?from=${today()}&to=${today()}`);
    assert.equal(res.status, 200, JSON.stringify(res.body));
    return tokens(res.body.data[0] as Usage);
  }

  /** The sum of the session's iteration records' usage (read before its delete), and the mark still open. */
  async function records(api: ServiceProcess['api'], tenant: string, id: string): Promise<Usage> {
    const iters = await api.as(`key-${tenant}`).get(`/v1/sessions/${id}/iterations`);
    assert.equal(iters.status, 200, JSON.stringify(iters.body));
    const data = iters.body.data as Array<{ usage: Usage }>;
    assert.equal(data.length, 1);
    const sum = tokens({
      input_tokens: 0,
      output_tokens: 0,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    });
    for (const it of data) for (const k of FIELDS) sum[k] += it.usage[k];
    assert.match(
      (await rig.r.hget(`s:{${id}}`, 'spend_open')) ?? '',
      /^\d+\|/,
      'the commit marked its spend',
    );
    return sum;
  }

  const seqOf = async (id: string) =>
    Number(((await rig.r.hget(`s:{${id}}`, 'spend_open')) ?? '').split('|')[0]);

  const remove = async (api: ServiceProcess['api'], tenant: string, id: string) =>
    assert.equal((await api.as(`key-${tenant}`).req('DELETE', `/v1/sessions/${id}`)).status, 200);

  /**
   * A replica on a proxy that deletes session `id` of `tenant`, the command holding `marker` forwarded and nothing
   * after it, and is killed there. It deletes a session of its own first, so Redis has the delete's script (sent as
   * one EVALSHA, not a NOSCRIPT answer and an EVAL that would be held).
   */
  async function deleteKilledAt(tenant: string, id: string, marker: string): Promise<void> {
    const deleter = await doomed(`delete-${tenant}`);
    const api = deleter.service.api.as(`key-${tenant}`);
    const warm = await api.post('/v1/sessions', { input: 'warm-up', start: false });
    assert.equal(warm.status, 201, JSON.stringify(warm.body));
    assert.equal((await api.req('DELETE', `/v1/sessions/${warm.body.id}`)).status, 200);
    const held = deleter.proxy.holdAfter(marker);
    const answered = api.req('DELETE', `/v1/sessions/${id}`).catch(() => null);
    // Never answered before the marker is sent: a delete that sends none fails here, not at the suite's timeout.
    const marked = await Promise.race([held.then(() => true), answered.then(() => false)]);
    assert.ok(marked, `the delete answered without sending ${marker}`);
    await deleter.killWhen(held);
    assert.equal(await answered, null, 'the killed replica answered nothing');
    assert.equal(await rig.r.exists(`s:{${id}}`), 0, 'the delete’s script ran');
  }

  /** A survivor's retention sweep finishes the deletes left: their marks and records gone. */
  async function swept(id: string): Promise<void> {
    await until(async () => (await rig.r.zcard('sessions:unindex')) === 0, 30_000, 'no delete marked');
    assert.equal(await rig.r.exists(`s:{${id}}:b`), 0, 'the delete’s record is dropped');
  }

  it('a run killed before its record, the session deleted: the delete records the turn, once', async () => {
    const id = await killedAtRecord('t1', 'at', 1);
    const survivor = await spawn('survivor-1');
    const sum = await records(survivor.api, 't1', id);
    const seq = await seqOf(id);
    assert.equal(await rig.r.hget(`q:{t1}:usage:${today()}`, 'in'), null, 'no record landed');
    await remove(survivor.api, 't1', id);
    assert.deepEqual(await day(survivor.api, 't1'), sum, "the turn's tokens in the tenant's day, once");
    assert.equal(await rig.r.exists(`s:{${id}}:b`), 0, 'the delete’s record is dropped');
    // The delete's record counted it: the session's seq stays, refusing a late record of it by a run still alive.
    assert.equal(await rig.r.hget('q:{t1}:spent', id), String(seq));
    await survivor.kill();
  });

  it('a run killed once its record ran, the session deleted: counted once, the seq forgotten', async () => {
    const id = await killedAtRecord('t2', 'after', 2);
    const survivor = await spawn('survivor-2');
    const sum = await records(survivor.api, 't2', id);
    await remove(survivor.api, 't2', id);
    assert.deepEqual(await day(survivor.api, 't2'), sum, "the turn's tokens in the tenant's day, once");
    assert.equal(await rig.r.hget('q:{t2}:spent', id), null, 'recorded before: the delete forgets its seq');
    await survivor.kill();
  });

  it('the run’s record lands after the delete’s: counted once', async () => {
    const { id, replica } = await heldAtRecord('t3', 'at', 3);
    const survivor = await spawn('survivor-3');
    const sum = await records(survivor.api, 't3', id);
    await remove(survivor.api, 't3', id);
    assert.deepEqual(await day(survivor.api, 't3'), sum, 'the delete recorded the turn');
    // The run's record, held until now, reaches Redis: seen by a MONITOR, so read after it ran.
    const monitor = await rig.r.monitor();
    const late = new Promise<void>((resolve) =>
      monitor.on('monitor', (_time: string, args: string[]) => {
        if (args.some((a) => a.includes(`q:{t3}${RECORD}`))) resolve();
      }),
    );
    replica.proxy.release();
    await late;
    monitor.disconnect();
    assert.deepEqual(await day(survivor.api, 't3'), sum, "the run's late record counted nothing");
    await replica.service.kill();
    await survivor.kill();
  });

  it('the deleting replica killed after its script: the sweep records the turn, once', async () => {
    const id = await killedAtRecord('t4', 'at', 4);
    const reader = await spawn('reader-4');
    const sum = await records(reader.api, 't4', id);
    const seq = await seqOf(id);
    await reader.kill();
    // The script names the deleted session's tenant key (`:g`), which nothing before it sends.
    await deleteKilledAt('t4', id, `s:{${id}}:g`);
    const left = Object.values(await rig.r.hgetall(`s:{${id}}:b`)).map(decodeGiveBack);
    assert.equal(left.length, 1, 'the delete left its record');
    assert.equal(left[0]?.open?.seq, seq, 'carrying the open spend');
    assert.equal(await rig.r.hget(`q:{t4}:usage:${today()}`, 'in'), null, 'no record landed');
    const survivor = await spawn('survivor-4');
    await swept(id);
    assert.deepEqual(await day(survivor.api, 't4'), sum, "the turn's tokens in the tenant's day, once");
    await survivor.kill();
  });

  it('the deleting replica killed after its record: the sweep’s second record counts nothing', async () => {
    const id = await killedAtRecord('t5', 'at', 5);
    const reader = await spawn('reader-5');
    const sum = await records(reader.api, 't5', id);
    await reader.kill();
    await deleteKilledAt('t5', id, RECORD);
    assert.equal(await rig.r.hlen(`s:{${id}}:b`), 1, 'the delete was killed before dropping its record');
    assert.equal(
      await rig.r.hget(`q:{t5}:usage:${today()}`, 'in'),
      String(sum.input_tokens),
      'the killed delete recorded the turn',
    );
    const survivor = await spawn('survivor-5');
    await swept(id);
    assert.deepEqual(await day(survivor.api, 't5'), sum, 'counted once');
    assert.equal(await rig.r.hget('q:{t5}:spent', id), null, 'the sweep forgets the seq recorded before');
    await survivor.kill();
  });
});
