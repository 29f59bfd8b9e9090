/**
 * A committed turn's spend reaches its tenant's day (`GET /v1/usage`, the TENANT_MAX_COST_USD_PER_DAY counter)
 * exactly once when the replica running the session is SIGKILLed between the commit and the record. The day's hash
 * is in the tenant's slot, the commit in the session's, so they are two commands (src/engine/commit.ts `commit`): the
 * commit marks the turn's spend open in the session (`spend_open`), and whoever finds the mark records it once — the
 * claim of the run's takeover, or the runs' sweep when the killed commit ended the run. A proxy in front of Redis
 * withholds the record's script (every record names the day's key `…:usage:<day>`, which nothing else the replica
 * sends names without a cost cap) or forwards it and withholds what follows, and the replica is killed there.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { serviceKillSuite } from '../helpers/redis-proxy.js';
import { untilKeyspace } from '../helpers/keyspace-wait.js';
import type { ServiceProcess } from '../helpers/process.js';
import { text, toolCall } from '../fake/script.js';

const TENANTS = ['t1', 't2', 't3'];
const ENV = { API_KEYS: TENANTS.map((t) => `${t}:key-${t}`).join(',') };
/** What only a record of a turn's spend sends (src/cost/spend.ts `usageKey`). */
const RECORD = ':usage:';
const today = () => new Date().toISOString().slice(0, 10);

interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

const used = (i: number) => ({
  usage: {
    input_tokens: 1000 + i,
    output_tokens: 100 + i,
    cache_creation_input_tokens: 10 + i,
    cache_read_input_tokens: 20 + i,
  },
});

describe(
  "a turn's spend when its replica is killed between the commit and the record",
  { timeout: 240_000 },
  () => {
    const { rig, spawn, doomed } = serviceKillSuite(ENV);

    /**
     * A replica on a fresh proxy creates a session of `tenant` (turns scripted by the caller); its first record is
     * withheld (`at`: before it runs; `after`: once it ran, what follows withheld), and the replica is killed there.
     * Returns the session's id.
     */
    async function killedAtRecord(tenant: string, at: 'at' | 'after', body: object): Promise<string> {
      const replica = await doomed(`doomed-${tenant}`);
      const held = at === 'at' ? replica.proxy.holdAt(RECORD) : replica.proxy.holdAfter(RECORD);
      const created = await replica.service.api.as(`key-${tenant}`).post('/v1/sessions', body);
      assert.equal(created.status, 201, JSON.stringify(created.body));
      await replica.killWhen(held);
      return created.body.id as string;
    }

    /**
     * The session's run is over: idle, and its due entry dropped, which its end does after the record of its last
     * commit (or the runs' sweep, after a run killed before its end).
     */
    async function ended(api: ServiceProcess['api'], tenant: string, id: string): Promise<void> {
      const done = await api.as(`key-${tenant}`).waitStatus(id, ['idle', 'failed'], 60_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      await untilKeyspace(
        rig.redis.url,
        rig.r,
        'runs:due',
        async () => ((await rig.r.zscore('runs:due', id)) === null ? null : `due (the run not ended): ${id}`),
        30_000,
      );
    }

    /** The day's usage of `tenant` as GET /v1/usage answers it, and the sum of the session's iteration records'. */
    async function spends(api: ServiceProcess['api'], tenant: string, id: string) {
      const as = api.as(`key-${tenant}`);
      const day = await as.get(`/v1/usage?from=${today()}&to=${today()}`);
      assert.equal(day.status, 200, JSON.stringify(day.body));
      const iters = await as.get(`/v1/sessions/${id}/iterations`);
      assert.equal(iters.status, 200, JSON.stringify(iters.body));
      const sum: Usage = {
        input_tokens: 0,
        output_tokens: 0,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
      };
      for (const it of iters.body.data as Array<{ usage: Usage }>)
        for (const k of Object.keys(sum) as Array<keyof Usage>) sum[k] += it.usage[k];
      const d = day.body.data[0] as Usage;
      return {
        day: {
          input_tokens: d.input_tokens,
          output_tokens: d.output_tokens,
          cache_creation_input_tokens: d.cache_creation_input_tokens,
          cache_read_input_tokens: d.cache_read_input_tokens,
        },
        records: sum,
        count: iters.body.data.length as number,
      };
    }

    it('a turn killed before its record, the run taken over: the takeover records it, once', async () => {
      rig.fake.enqueue(
        toolCall('calculate_sum', { a: 1, b: 2 }, used(1)),
        toolCall('calculate_sum', { a: 3, b: 4 }, used(2)),
        text('Done.', used(3)),
      );
      const id = await killedAtRecord('t1', 'at', { input: 'add', tools: ['calculate_sum'] });
      assert.equal(await rig.r.hget(`q:{t1}:usage:${today()}`, 'in'), null, 'no record landed');
      assert.match(
        (await rig.r.hget(`s:{${id}}`, 'spend_open')) ?? '',
        /^\d+\|/,
        'the commit marked its spend',
      );
      const survivor = await spawn('survivor-1');
      await ended(survivor.api, 't1', id);
      const { day, records, count } = await spends(survivor.api, 't1', id);
      assert.equal(count, 3);
      assert.deepEqual(day, records, "every turn's tokens in the tenant's day, once");
      // The takeover's end dropped the mark of what it recorded.
      assert.equal(await rig.r.hget(`s:{${id}}`, 'spend_open'), null);
      await survivor.kill();
    });

    it('the turn that ended the run killed before its record: the runs’ sweep records it, once', async () => {
      rig.fake.enqueue(text('Hello.', used(4)));
      const id = await killedAtRecord('t2', 'at', { input: 'hi' });
      const survivor = await spawn('survivor-2');
      const at = await survivor.api.as('key-t2').get(`/v1/sessions/${id}`);
      assert.equal(at.body.status, 'idle', 'the killed commit ended the run');
      // The killed run's due entry is the runs' sweep's once its lease could have lapsed; the sweep drops it.
      await ended(survivor.api, 't2', id);
      const { day, records, count } = await spends(survivor.api, 't2', id);
      assert.equal(count, 1);
      assert.deepEqual(day, records, "the turn's tokens in the tenant's day, once");
      await survivor.kill();
    });

    it('a turn killed once its record ran: the takeover records it again, counted once', async () => {
      rig.fake.enqueue(toolCall('calculate_sum', { a: 5, b: 6 }, used(5)), text('Done.', used(6)));
      const id = await killedAtRecord('t3', 'after', { input: 'add', tools: ['calculate_sum'] });
      assert.equal(await rig.r.hget(`q:{t3}:usage:${today()}`, 'in'), '1005', 'the record landed');
      // The mark stays (the killed run never released it): the takeover's claim records it again, which counts nothing.
      assert.match((await rig.r.hget(`s:{${id}}`, 'spend_open')) ?? '', /^\d+\|/, 'the mark is left');
      const survivor = await spawn('survivor-3');
      await ended(survivor.api, 't3', id);
      const { day, records, count } = await spends(survivor.api, 't3', id);
      assert.equal(count, 2);
      assert.deepEqual(day, records, "every turn's tokens in the tenant's day, once");
      await survivor.kill();
    });
  },
);
