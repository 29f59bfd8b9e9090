/**
 * A tool task's copies of its call's input and result count in its tenant's TENANT_MAX_BYTES while the queue keeps
 * them (src/tenant-tools/lua/includes/held-bytes.lua): the tenant's count rises by the input's bytes when the step
 * queues the call, and comes back down when the call is settled, whichever way: its result delivered, its session
 * cancelled or deleted, its deadline passed (the sweep's error result delivered). A call queued by a run is counted,
 * never refused, even past the limit; the count is what a client's write is refused by. The queue's scripts give back
 * exactly what a record holds, once: a second settle, a tombstone's gc, a record queued before the count existed give
 * nothing back.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';
import { StorageQuota, storageKey } from '../../src/store/storage-quota.js';
import { taskKeys } from '../../src/tenant-tools/keys.js';
import { TaskQueue, type NewTask } from '../../src/tenant-tools/tasks.js';
import type { TaskRecord } from '../../src/tenant-tools/task-record.js';

const MAX = 10_000_000;
const SIZE = 20_000;
const TENANTS = ['res', 'can', 'del', 'exp', 'full'];

const ship = {
  description: 'Ship an order.',
  input_schema: { type: 'object', properties: { order: { type: 'number' }, note: { type: 'string' } } },
  runner: { type: 'worker' },
};

describe("a tool task's bytes in its tenant's storage count", { timeout: 120_000 }, () => {
  let h: Harness;
  let r: Redis;
  let quota: StorageQuota;
  const api: Record<string, Api> = {};
  before(async () => {
    h = await startHarness({
      env: {
        API_KEYS: TENANTS.map((t) => `${t}:key-${t}`).join(','),
        TENANT_MAX_BYTES: String(MAX),
        TOOL_TASK_LEASE_MS: '20000',
      },
    });
    r = new Redis(h.redis.url);
    quota = new StorageQuota(r, MAX);
    for (const t of TENANTS) {
      api[t] = h.api.as(`key-${t}`);
      const put = await api[t].req(
        'PUT',
        '/v1/tools/ship',
        t === 'exp' ? { ...ship, timeout_ms: 1000 } : ship,
      );
      assert.equal(put.status, 201, JSON.stringify(put.body));
    }
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });
  beforeEach(() => h.fake.reset());

  /** The tenant's count (what a client's write is refused by) and the part of it its tool tasks hold. */
  const count = async (tenant: string) => ({
    used: await quota.used(tenant),
    sessions: Number((await r.get(storageKey(tenant))) ?? 0),
    tasks: Number((await r.get(taskKeys(tenant).bytes)) ?? 0),
  });

  /**
   * A session of `tenant` whose step calls `ship` with a `size`-byte note, its task claimed (so queued): the session,
   * the claimed task, the input's bytes as the queue keeps them, and the tenant's count before the session.
   */
  async function callOut(tenant: string, size: number) {
    const a = api[tenant]!;
    const input = { order: 3, note: 'n'.repeat(size) };
    h.fake.enqueue(toolCalls([toolUse('ship', input, `toolu_${tenant}`)]), text('Shipped.'));
    const before = await count(tenant);
    assert.equal(before.tasks, 0);
    const id = (await a.post('/v1/sessions', { input: 'ship 3', tools: ['ship'] })).body.id as string;
    const claimed = await a.post('/v1/tool-tasks/claim', { tools: ['ship'], wait_ms: 20_000 });
    const task = claimed.body.tasks[0];
    assert.ok(task, JSON.stringify(claimed.body));
    return { a, id, task, inputBytes: Buffer.byteLength(JSON.stringify(input)), before };
  }

  /** While the call is out: the tenant's count is its sessions' bytes and the task's input. */
  async function assertOut(tenant: string, inputBytes: number) {
    const c = await count(tenant);
    assert.equal(c.tasks, inputBytes, "the task's input is counted");
    assert.equal(c.used, c.sessions + inputBytes);
  }

  it('rises by the input while the call is out, and comes down when its result is delivered', async () => {
    const { a, id, task, inputBytes } = await callOut('res', SIZE);
    await assertOut('res', inputBytes);
    // The count a client's write is refused by: with 5000 bytes of room left but for the task's, a 10 KB write is
    // refused; given back, they make room for it.
    const room = async () => r.set(storageKey('res'), MAX - inputBytes - 5000);
    const write = () => a.post('/v1/sessions', { input: 'x'.repeat(10_000), start: false });
    await room();
    const refused = await write();
    assert.equal(refused.status, 429, JSON.stringify(refused.body));
    assert.equal(refused.body.error.details.quota, 'storage_bytes');
    const res = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'shipped' });
    assert.equal(res.status, 200, JSON.stringify(res.body));
    // Settled before the answer: nothing held, the counter's key gone.
    const c = await count('res');
    assert.equal(c.tasks, 0);
    assert.equal(c.used, c.sessions);
    assert.equal(await r.exists(taskKeys('res').bytes), 0);
    assert.equal((await a.waitStatus(id, ['idle', 'failed'], 30_000)).stop_reason, 'end_turn');
    await room();
    const fits = await write();
    assert.equal(fits.status, 201, JSON.stringify(fits.body));
  });

  it('comes down when the session is cancelled; a worker answering late gives nothing back twice', async () => {
    const { a, id, task, inputBytes } = await callOut('can', SIZE);
    await assertOut('can', inputBytes);
    const c = await a.post(`/v1/sessions/${id}/cancel`);
    assert.equal(c.status, 200, JSON.stringify(c.body));
    assert.equal((await count('can')).tasks, 0);
    const late = await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'shipped' });
    assert.equal(late.status, 409, JSON.stringify(late.body));
    const after = await count('can');
    assert.equal(after.tasks, 0);
    assert.equal(after.used, after.sessions);
  });

  it('comes back to what it was before the session once the session is deleted', async () => {
    const { a, id, inputBytes, before } = await callOut('del', SIZE);
    await assertOut('del', inputBytes);
    assert.equal((await a.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.deepEqual(await count('del'), before);
  });

  it('comes down once the call timed out and its error result was delivered', async () => {
    const { a, id, inputBytes } = await callOut('exp', SIZE);
    await assertOut('exp', inputBytes);
    // The worker never answers: the sweep fails the call at its timeout_ms (1000), its error result is delivered.
    const done = await a.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(done.stop_reason, 'end_turn', JSON.stringify(done.error));
    const sent = h.fake.requests.at(-1)!.messages.at(-1)!.content as Array<{ content: string }>;
    assert.match(sent[0]!.content, /no worker answered within 1000 ms/);
    // Settled after the run was kicked (the run may end first).
    await until(
      async () => (await count('exp')).tasks === 0,
      10_000,
      "the timed-out task's bytes given back",
    );
    const c = await count('exp');
    assert.equal(c.used, c.sessions);
  });

  it('counts a call its step queues at the limit, never refusing it: the session goes on', async () => {
    const a = api['full']!;
    const input = { order: 3, note: 'n'.repeat(SIZE) };
    // The tenant reaches its limit while the model answers: the step's task is queued all the same (a run's write).
    let n = 0;
    h.fake.setHandler(async () => {
      if (n++ > 0) return text('Shipped.');
      await r.set(storageKey('full'), MAX);
      return toolCalls([toolUse('ship', input, 'toolu_full')]);
    });
    const id = (await a.post('/v1/sessions', { input: 'ship 3', tools: ['ship'] })).body.id as string;
    const claimed = await a.post('/v1/tool-tasks/claim', { tools: ['ship'], wait_ms: 20_000 });
    const task = claimed.body.tasks[0];
    assert.ok(task, JSON.stringify(claimed.body));
    const inputBytes = Buffer.byteLength(JSON.stringify(input));
    await assertOut('full', inputBytes);
    assert.ok((await count('full')).used > MAX + inputBytes);
    assert.equal((await a.post(`/v1/tool-tasks/${task.id}/result`, { content: 'ok' })).status, 200);
    assert.equal((await count('full')).tasks, 0);
    assert.equal((await a.waitStatus(id, ['idle', 'failed'], 30_000)).stop_reason, 'end_turn');
  });

  describe('the queue scripts', () => {
    let q: TaskQueue;
    before(() => {
      q = new TaskQueue(r, 20_000, 2);
    });
    const held = async (tenant: string) => Number((await r.get(taskKeys(tenant).bytes)) ?? 0);
    const task = (toolUseId: string, maxAttempts = 3): NewTask => ({
      session: 'sess_q',
      toolUseId,
      round: 0,
      name: 'ship',
      input: { note: `${toolUseId} `.repeat(100) },
      runner: 'worker',
      maxAttempts,
      timeoutMs: 600_000,
    });
    const inputBytes = (t: NewTask) => Buffer.byteLength(JSON.stringify(t.input));
    const call = (t: NewTask) => `${t.session}:${t.toolUseId}#0`;
    const resultBytes = async (tenant: string, c: string) => r.hstrlen(taskKeys(tenant).results, c);

    it('count an input once, a result while held, and give back exactly that once (settle, settle again, gc)', async () => {
      const t = task('toolu_a');
      assert.deepEqual(await q.enqueueAll('qa', [t, t]), ['queued', 'known']);
      assert.equal(await held('qa'), inputBytes(t), 'a call queued again is not counted again');
      // The tenant's bound (2 here) refuses calls: nothing counted for them.
      assert.deepEqual(await q.enqueueAll('qa', [task('toolu_b'), task('toolu_c')]), ['queued', 'full']);
      assert.equal(await held('qa'), inputBytes(t) + inputBytes(task('toolu_b')));
      const [claimed] = await q.claim('qa', ['ship'], 1, 'w');
      assert.equal(claimed!.rec.call, call(t));
      const result = JSON.stringify({ content: 'shipped', is_error: false });
      assert.equal(typeof (await q.complete('qa', claimed!.rec.offer, result)), 'object');
      assert.equal(await held('qa'), inputBytes(t) + Buffer.byteLength(result) + inputBytes(task('toolu_b')));
      // An unconditional cancel leaves a call whose result was taken to its delivery: nothing given back.
      await q.settle('qa', call(t), 'cancelled');
      assert.equal(await held('qa'), inputBytes(t) + Buffer.byteLength(result) + inputBytes(task('toolu_b')));
      await q.settle('qa', call(t), 'delivered');
      await q.settle('qa', call(t), 'delivered');
      assert.equal(await held('qa'), inputBytes(task('toolu_b')), 'given back once');
      await q.settle('qa', call(task('toolu_b')), 'cancelled');
      assert.equal(await r.exists(taskKeys('qa').bytes), 0);
      // The tombstones' gc (made due now) gives nothing back again.
      const k = taskKeys('qa');
      await r.zadd(k.gc, 0, call(t), 0, call(task('toolu_b')));
      await q.sweep('qa');
      assert.equal(await r.hlen(k.calls), 0, 'the tombstones are gone');
      assert.equal(await r.exists(k.bytes), 0);
    });

    it("count a timed-out call's error result and a failed last try's, given back when settled", async () => {
      const t = task('toolu_t');
      assert.equal(await q.enqueue('qt', t), 'queued');
      const k = taskKeys('qt');
      // Its deadline made due (of Redis's clock, as the scripts compare): the sweep fails it.
      await r.zadd(k.deadline, 0, call(t));
      assert.equal((await q.sweep('qt')).changes[0]?.kind, 'failed');
      assert.equal(await held('qt'), inputBytes(t) + (await resultBytes('qt', call(t))));
      const rec = JSON.parse((await r.hget(k.calls, call(t)))!) as TaskRecord;
      assert.equal(await q.cancelUnlessWanted(rec), true);
      assert.equal(await held('qt'), 0);

      const last = task('toolu_l', 1);
      assert.equal(await q.enqueue('qt', last), 'queued');
      const [claimed] = await q.claim('qt', ['ship'], 1, 'w');
      assert.equal(
        (await q.release('qt', claimed!.rec.offer, 0, 'Error: failed', 'HTTP 500')).kind,
        'failed',
      );
      assert.equal(await held('qt'), inputBytes(last) + (await resultBytes('qt', call(last))));
      await q.settle('qt', call(last), 'delivered');
      assert.equal(await r.exists(k.bytes), 0);
    });

    it('give back nothing for a call queued before the count existed', async () => {
      const t = task('toolu_old');
      assert.equal(await q.enqueue('qo', t), 'queued');
      const k = taskKeys('qo');
      // As an older enqueue script left it: a record without `bytes`, nothing counted.
      const rec = JSON.parse((await r.hget(k.calls, call(t)))!) as TaskRecord;
      delete rec.bytes;
      await r.hset(k.calls, call(t), JSON.stringify(rec));
      await r.del(k.bytes);
      await q.settle('qo', call(t), 'cancelled');
      assert.equal(await r.exists(k.bytes), 0, 'the count went below what was counted');
    });
  });
});
