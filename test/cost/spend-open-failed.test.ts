/**
 * A turn whose record in its tenant's day failed without a crash (a Redis error on the tenant's slot: records are
 * best effort, and swallow it) still reaches the day, once. The session's `spend_open` keeps every turn committed
 * until a record through it succeeded (apply-8.lua keeps the entries above the run's `spend_recorded`), and the run
 * sends the turns it could not record before its next one (src/engine/commit.ts `recordSpend`); record-2.lua counts a
 * seq of a session once, so a record that landed and is sent again adds nothing. The record is made to fail by
 * turning the tenant's ledger of recorded seqs (`q:{<tenant>}:spent`) into a string: record-2.lua's first command on
 * it (HGET) fails WRONGTYPE, before it writes anything.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Harness } from '../helpers/service.js';
import { untilKeyspace } from '../helpers/keyspace-wait.js';
import { offlineHandler, text, toolCall, type FakeReply } from '../fake/server.js';
import type { RunHandle } from '../../src/engine/run-handle.js';
import { PriceTable } from '../../src/cost/prices.js';
import { SPEND_OPEN_MAX, TenantSpend, openSpendTail, parseOpenSpend } from '../../src/cost/spend.js';

const TENANT = 'tsf';
const SPENT = `q:{${TENANT}}:spent`;
const RUNS_DUE = 'runs:due';
const today = () => new Date().toISOString().slice(0, 10);

/** A reply's usage: turn `i`'s tokens, distinct per turn so that a sum tells which turns it holds. */
const used = (i: number) => ({ usage: { input_tokens: 1000 * i, output_tokens: 10 * i } });

describe("a turn whose record failed without a crash still reaches its tenant's day, once", () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `${TENANT}:key-${TENANT}` } });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r?.disconnect();
    await h?.close();
  });
  beforeEach(async () => {
    h.fake.reset();
    await r.del(SPENT, `q:{${TENANT}}:usage:${today()}`);
  });

  /** The tenant's day as GET /v1/usage answers it: input and output tokens. */
  async function day(): Promise<{ input_tokens: number; output_tokens: number }> {
    const u = await h.api.get(`/v1/usage?from=${today()}&to=${today()}`);
    assert.equal(u.status, 200, JSON.stringify(u.body));
    const d = u.body.data[0] as { input_tokens: number; output_tokens: number };
    return { input_tokens: d.input_tokens, output_tokens: d.output_tokens };
  }

  /**
   * The fake answers request n with `replies[n - 1]`; before each request listed in `gated` it waits for that request's
   * gate, which `open(n)` opens (the run's earlier turns are committed and recorded by then: a commit awaits its
   * record, and the next request comes after it).
   */
  function scripted(replies: FakeReply[], gated: number[]) {
    const gates = new Map(
      gated.map((n) => {
        let open!: () => void;
        const gate = new Promise<void>((resolve) => (open = resolve));
        return [n, { gate, open }] as const;
      }),
    );
    let n = 0;
    h.fake.setHandler(async (req) => {
      const i = ++n;
      await gates.get(i)?.gate;
      return replies[i - 1] ?? offlineHandler(req, i);
    });
    return { open: (i: number) => gates.get(i)!.open() };
  }

  /**
   * The session's run in this process, taken while it waits on a gate of the fake (`scripted`): its `done` settles
   * once its end returned, after its release (src/engine/run.ts `end`). Not the lease key's del: the run's last
   * commit deletes the lease (`release_lease`), before the end records and releases.
   */
  function heldRun(id: string): RunHandle {
    const run = h.service.app.engine.runHere(id);
    assert.ok(run, `the run of ${id} is in this process`);
    return run;
  }

  /**
   * The store's records of open spend (TenantSpend `recordOpen`, which every record of the engine's goes through)
   * made while `fn` runs: the seqs of each call, in call order. `after(i)`, if given, runs after call i (1-based)
   * settled.
   */
  async function recordsDuring(fn: () => Promise<unknown>, after?: (i: number) => Promise<void>) {
    const spend = h.service.app.store.spend;
    const original = spend.recordOpen;
    const calls: number[][] = [];
    spend.recordOpen = async (tenant, session, open) => {
      calls.push(open.map((o) => o.seq));
      const i = calls.length;
      try {
        return await original.call(spend, tenant, session, open);
      } finally {
        await after?.(i);
      }
    };
    try {
      await fn();
    } finally {
      spend.recordOpen = original;
    }
    return calls;
  }

  /** Opens the fake's gate `n` (`scripted`); resolves once the session is `idle` and its run's end returned. */
  async function openToIdle(fake: { open: (n: number) => void }, n: number, id: string, run: RunHandle) {
    fake.open(n);
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    await run.done;
    return done;
  }

  const spendOpen = async (id: string) => r.hget(`s:{${id}}`, 'spend_open');

  /**
   * A session whose first turn (a tool call) committed with its record failing (the tenant's ledger a string), its
   * run held at the fake's gate before request 2: the fake (`scripted`: `replies`, `gated`), the id and the run.
   */
  async function firstRecordFailed(replies: FakeReply[], gated: number[]) {
    await r.set(SPENT, 'not a hash');
    const fake = scripted(replies, gated);
    const created = await h.api.post('/v1/sessions', { input: 'add', tools: ['calculate_sum'] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    // The first turn is committed and its record failed: the second request comes after both.
    await h.fake.waitForRequests(2);
    return { fake, id, run: heldRun(id) };
  }
  const twoTurns = () => [toolCall('calculate_sum', { a: 1, b: 2 }, used(1)), text('3.', used(2))];

  it("a failed record, then the run's next billed turn: the day holds both turns, each once", async () => {
    const { fake, id, run } = await firstRecordFailed(twoTurns(), [2]);
    assert.deepEqual(await day(), { input_tokens: 0, output_tokens: 0 }, 'the first record failed');
    assert.match((await spendOpen(id)) ?? '', /^\d+\|[^;]+$/, 'the first turn is kept open');
    await r.del(SPENT);
    await openToIdle(fake, 2, id, run);
    assert.deepEqual(await day(), { input_tokens: 3000, output_tokens: 30 }, 'both turns, each once');
    // Recorded through the last turn: the run's end left no open spend.
    assert.equal(await spendOpen(id), null);
  });

  it('a record that landed though the run saw it fail is sent again and counted once', async () => {
    const { fake, id, run } = await firstRecordFailed(twoTurns(), [2]);
    // What a record whose answer was lost leaves: the turn counted, its seq recorded, the run unaware of it.
    await r.del(SPENT);
    const spend = new TenantSpend(r, {
      prices: new PriceTable(),
      capUsdPerDay: 0,
      retentionDays: 30,
      now: () => Date.now(),
    });
    const open = parseOpenSpend(await spendOpen(id));
    assert.equal(open.length, 1);
    const first = open[0]!.seq;
    assert.deepEqual(
      run.spendUnrecorded.map((o) => o.seq),
      [first],
      'the run saw the record fail',
    );
    assert.equal(await spend.recordOpen(TENANT, id, open), first);
    assert.deepEqual(await day(), { input_tokens: 1000, output_tokens: 10 });
    const calls = await recordsDuring(() => openToIdle(fake, 2, id, run));
    // The run's record of its second turn sent the first again, in one call, before it.
    assert.equal(calls.length, 1, JSON.stringify(calls));
    const [resent, second] = calls[0]!;
    assert.equal(resent, first, 'the landed turn sent again');
    assert.ok(second! > first);
    assert.deepEqual(run.spendUnrecorded, [], 'nothing left unrecorded');
    assert.equal(run.spendRecorded, second);
    assert.equal(await r.hget(SPENT, id), String(second), "the ledger's seq moved to the second turn");
    assert.deepEqual(
      await day(),
      { input_tokens: 3000, output_tokens: 30 },
      'the first turn is not counted twice',
    );
    assert.equal(await spendOpen(id), null);
  });

  it("records that failed until the run's end: the next run's claim records the kept turns, once", async () => {
    const { fake, id, run } = await firstRecordFailed([...twoTurns(), text('Again 3.', used(4))], [2, 3]);
    const done = await openToIdle(fake, 2, id, run);
    // Neither turn reached the day; both are kept, oldest first, past the run's end.
    assert.deepEqual(await day(), { input_tokens: 0, output_tokens: 0 });
    const kept = parseOpenSpend(await spendOpen(id));
    assert.deepEqual(
      kept.map((o) => o.incr.in),
      [1000, 2000],
    );
    assert.ok(kept[0]!.seq < kept[1]!.seq);
    await r.del(SPENT);
    const posted = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Again.' });
    assert.equal(posted.status, 202, JSON.stringify(posted.body));
    await h.fake.waitForRequests(3);
    const next = heldRun(id);
    fake.open(3);
    const again = await h.api.waitFor(id, (s) => s.status === 'idle' && s.revision > done.revision);
    assert.equal(again.status, 'idle');
    await next.done;
    assert.deepEqual(await day(), { input_tokens: 7000, output_tokens: 70 }, 'the three turns, each once');
    assert.equal(await spendOpen(id), null);
  });

  it("records that failed through the run's last commit, the ledger mended then: the end's retry counts them, once", async () => {
    const { fake, id, run } = await firstRecordFailed(twoTurns(), [2]);
    // The ledger is mended right after the record of the run's last commit (its second) failed: only the end's
    // retry, before its release, can count the two turns now (a run that ended removed its due entry, so the runs'
    // sweep does not find it).
    const calls = await recordsDuring(
      () => openToIdle(fake, 2, id, run),
      async (i) => {
        if (i === 1) await r.del(SPENT);
      },
    );
    assert.equal(calls.length, 2, JSON.stringify(calls));
    assert.deepEqual(calls[1], calls[0], "the end's retry sent the two turns again");
    assert.deepEqual(await day(), { input_tokens: 3000, output_tokens: 30 }, 'both turns, each once');
    assert.equal(await spendOpen(id), null, 'the release dropped what the retry recorded');
    // The session deleted after: the delete records nothing (its run is over), and the day keeps the turns.
    const deleting = await recordsDuring(async () =>
      assert.equal((await h.api.req('DELETE', `/v1/sessions/${id}`)).status, 200),
    );
    assert.deepEqual(deleting, [], 'the delete records nothing');
    assert.deepEqual(await day(), { input_tokens: 3000, output_tokens: 30 });
  });

  it("the runs' sweep: a session whose open spend it cannot record is left for later, and the pass goes on", async () => {
    // Two ended sessions left due (as by runs killed after their last commit): the first with a turn open in a
    // tenant's day that refuses it (the ledger a string), the second with none. Due first, the first must not hold
    // up the second: the sweep ends the second and puts the first behind the others.
    const store = h.service.app.store;
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const created = await h.api.post('/v1/sessions', { start: false });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      ids.push(created.body.id as string);
    }
    const [broken, fine] = ids as [string, string];
    const spend = { in: 5, out: 0, cw: 0, cr: 0, cost: 0, nc: 0 };
    await store.apply(broken, {}, { spend_open: openSpendTail(spend, Date.now()) });
    await r.set(SPENT, 'not a hash');
    try {
      // A slot left by the broken one's run: given back all the same (only its due entry waits for the retry).
      await r.zadd(`q:{${TENANT}}:runs`, 1, broken);
      await r.zadd(RUNS_DUE, 1, broken, 2, fine);
      await untilKeyspace(
        h.redis.url,
        r,
        RUNS_DUE,
        async () => {
          const [secs] = await r.time();
          const [left, later] = [await r.zscore(RUNS_DUE, fine), await r.zscore(RUNS_DUE, broken)];
          if (left !== null) return `${fine} still due`;
          return Number(later) > Number(secs) * 1000 + 20_000 ? null : `${broken} due at ${later}`;
        },
        10_000,
      );
      assert.equal(parseOpenSpend(await spendOpen(broken)).length, 1, 'its turn is still open');
      assert.equal(await r.zscore(`q:{${TENANT}}:runs`, broken), null, 'its run slot given back');
    } finally {
      await r.zrem(RUNS_DUE, broken);
      await r.del(SPENT);
    }
  });

  it("spend_open: the entries above the run's recorded seq, at most SPEND_OPEN_MAX; the release drops those through its seq", async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    const store = h.service.app.store;
    const billed = (n: number, recorded?: number) =>
      store.apply(
        id,
        {},
        {
          spend_open: openSpendTail({ in: n, out: 0, cw: 0, cr: 0, cost: 0, nc: 0 }, Date.now()),
          ...(recorded === undefined ? {} : { spend_recorded: recorded }),
        },
      );
    const seqs: number[] = [];
    for (let n = 1; n <= SPEND_OPEN_MAX + 1; n++) seqs.push((await billed(n)).revision);
    let open = parseOpenSpend(await spendOpen(id));
    assert.equal(open.length, SPEND_OPEN_MAX, 'the oldest dropped past the bound');
    assert.deepEqual(
      open.map((o) => o.seq),
      seqs.slice(1),
    );
    // Recorded through the 30th turn: the three later ones stay, then the new one.
    const last = (await billed(100, seqs[29])).revision;
    open = parseOpenSpend(await spendOpen(id));
    assert.deepEqual(
      open.map((o) => [o.seq, o.incr.in]),
      [
        [seqs[30], 31],
        [seqs[31], 32],
        [seqs[32], 33],
        [last, 100],
      ],
    );
    // The release drops the entries at or below the seq given, whoever holds the lease; none left: the field.
    await store.runs.release(id, 'nobody', 0, false, seqs[31]!);
    assert.deepEqual(
      parseOpenSpend(await spendOpen(id)).map((o) => o.seq),
      [seqs[32], last],
    );
    await store.runs.release(id, 'nobody', 0, false, last);
    assert.equal(await spendOpen(id), null);
  });
});
