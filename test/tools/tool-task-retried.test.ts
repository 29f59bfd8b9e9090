/**
 * A lost lease's `tool_task.retried` is written exactly once, even when the replica sweeping the tenant's queue is
 * killed between offering the call again (the sweep script) and writing the event (a write in the session's slot,
 * another command). The kill is simulated precisely: the test runs the sweep script alone, as the dead sweeper did,
 * on a lease made to have lapsed (the scripts read Redis's clock), and writes nothing else. The event then comes with the call's next claim, before its
 * `tool.started` (attempt 2), or from the next sweep on the service; a second writer of the same debt writes nothing.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';
import { defineLuaCommands } from '../../src/store/lua-commands.js';
import { taskKeys, wakeChannel } from '../../src/tenant-tools/keys.js';

const LEASE_MS = 3000;

/** The tool-task scripts as the test calls them: keys and arguments as given (taskKeys' order is the scripts'). */
interface Scripts {
  ttSweep(...args: Array<string | number>): Promise<Array<string | number>>;
  sessToolRetried(...args: Array<string | number>): Promise<number>;
}

describe(
  'tool_task.retried when the sweeper dies after offering the call again',
  { timeout: 120_000 },
  () => {
    let h: Harness;
    let a: Api;
    let r: Redis;
    let scripts: Scripts;
    before(async () => {
      h = await startHarness({ env: { API_KEYS: 'acme:key-a', TOOL_TASK_LEASE_MS: String(LEASE_MS) } });
      a = h.api.as('key-a');
      r = new Redis(h.redis.url);
      defineLuaCommands(r, new URL('../../src/tenant-tools/lua/', import.meta.url), 'tt');
      defineLuaCommands(r, new URL('../../src/store/lua/', import.meta.url), 'sess');
      scripts = r as unknown as Scripts;
      // A tool for each case: a call one case leaves behind (as it does without the fix) is not the other's.
      for (const name of ['lookup', 'find']) {
        const put = await a.req('PUT', `/v1/tools/${name}`, {
          description: 'Look an order up.',
          input_schema: { type: 'object', properties: { id: { type: 'number' } } },
          runner: { type: 'worker' },
        });
        assert.equal(put.status, 201, JSON.stringify(put.body));
      }
    });
    after(async () => {
      r?.disconnect();
      await h?.close();
    });

    /** The session's log: type and data of each event, in order. */
    const log = async (id: string) =>
      (await r.xrange(`s:{${id}}:e`, '-', '+')).map(([, f]) => {
        const m = new Map<string, string>();
        for (let i = 0; i + 1 < f.length; i += 2) m.set(f[i]!, f[i + 1]!);
        return { type: m.get('t') ?? '', data: JSON.parse(m.get('d') ?? 'null') };
      });
    const retried = async (id: string) => (await log(id)).filter((e) => e.type === 'tool_task.retried');

    /** A session waiting for its `tool` call, claimed once (attempt 1), whose lease the sweeper then took back. */
    async function lostLease(tool: string, toolUseId: string): Promise<string> {
      h.fake.reset();
      h.fake.enqueue(toolCalls([toolUse(tool, { id: 1 }, toolUseId)]), text('found'));
      const id = (await a.post('/v1/sessions', { input: 'look 1', tools: [tool] })).body.id;
      const first = await a.post('/v1/tool-tasks/claim', { tools: [tool], wait_ms: 20_000, worker_id: 'w1' });
      assert.equal(first.body.tasks[0]?.attempt, 1, JSON.stringify(first.body));
      // The dead sweeper's first step, and only that, on a lease that lapsed: the scripts compare with Redis's own
      // clock, so the lease is moved into its past (the service's own sweep looks at the tenant only when the lease
      // would have lapsed, LEASE_MS from now).
      const k = taskKeys('acme');
      const [sec] = await r.time();
      const call = (await r.hget(k.offers, first.body.tasks[0].id))!;
      const rec = JSON.parse((await r.hget(k.calls, call))!);
      rec.lease = Number(sec) * 1000 - 1000;
      await r.hset(k.calls, call, JSON.stringify(rec));
      await r.zadd(k.leased, rec.lease, call);
      const rows = await scripts.ttSweep(...Object.values(k), 100, wakeChannel('acme'));
      assert.ok(rows.includes('retried'), `offered again: ${JSON.stringify(rows)}`);
      assert.deepEqual(await retried(id), [], 'the sweeper died before writing the event');
      return id;
    }

    it('the next claim writes the owed event before its tool.started, once', async () => {
      const id = await lostLease('lookup', 'toolu_claim');
      const again = await a.post('/v1/tool-tasks/claim', {
        tools: ['lookup'],
        wait_ms: 20_000,
        worker_id: 'w2',
      });
      const task = again.body.tasks[0];
      assert.equal(task?.attempt, 2, JSON.stringify(again.body));
      // The claim answered after its events were written.
      const events = (await log(id)).filter(
        (e) => e.type === 'tool_task.retried' || e.type === 'tool.started',
      );
      assert.deepEqual(
        events.map((e) => [e.type, e.data.attempt]),
        [
          ['tool.started', 1],
          ['tool_task.retried', 1],
          ['tool.started', 2],
        ],
      );
      assert.deepEqual(
        { ...events[1]!.data },
        {
          tool_use_id: 'toolu_claim',
          name: 'lookup',
          attempt: 1,
          next_attempt: 2,
          worker_id: 'w1',
          reason: 'lease_expired',
        },
      );
      // The claim cleared the debt, so no sweep writes the event again.
      await until(async () => (await r.exists(taskKeys('acme').owed)) === 0, 20_000, 'the debt cleared');
      const ok = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'order 1: shipped' });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      await h.api.waitStatus(id, 'idle', 20_000);
      assert.equal((await retried(id)).length, 1);
    });

    it('without a claim, the next sweep on any replica writes it, once', async () => {
      const id = await lostLease('find', 'toolu_sweep');
      // No worker claims: the service's sweep pays the debt (the tenant is due when the lost lease would have lapsed).
      await until(async () => (await retried(id)).length > 0, 20_000, 'the owed tool_task.retried');
      await until(async () => (await r.exists(taskKeys('acme').owed)) === 0, 20_000, 'the debt cleared');
      // A second replica that read the debt before it was cleared writes it again: the session's script refuses.
      const [rec] = await retried(id);
      assert.deepEqual(rec!.data, {
        tool_use_id: 'toolu_sweep',
        name: 'find',
        attempt: 1,
        next_attempt: 2,
        worker_id: 'w1',
        reason: 'lease_expired',
      });
      const [type, data] = [rec!.type, JSON.stringify(rec!.data)];
      const args = [`s:{${id}}`, `s:{${id}}:e`, `ev:{${id}}`, 1000, Date.now(), 16_384, 1 << 24];
      assert.equal(await scripts.sessToolRetried(...args, 'toolu_sweep', 0, 1, type, data), 0);
      assert.equal((await retried(id)).length, 1);
      const again = await a.post('/v1/tool-tasks/claim', {
        tools: ['find'],
        wait_ms: 20_000,
        worker_id: 'w2',
      });
      assert.equal(again.body.tasks[0]?.attempt, 2, JSON.stringify(again.body));
      assert.equal((await retried(id)).length, 1);
      const ok = await a.post(`/v1/tool-tasks/${again.body.tasks[0].id}/result`, {
        content: 'order 1: shipped',
      });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      await h.api.waitStatus(id, 'idle', 20_000);
      assert.equal((await retried(id)).length, 1);
    });
  },
);
