/**
 * The typed client's `ToolWorker` against a real service: `stop()` while a claim is being answered loses none of the
 * calls that claim leased (they run and are submitted before it resolves), and a concurrency above the service's
 * bound on one claim's `max` (100) still claims. `start()` and `stop()` are one state machine: starts at once share
 * one claim loop, a stop during a start wins and a start after it works. A tool that ignores its signal frees its
 * slot `abortGraceMs` after its call is over, so `stop()` resolves; a result is sent until the service answers, past
 * the lease, while the service is away and does not sweep (found by a probe).
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ToolWorker, type Event, type WorkerTool } from '../../packages/client/src/index.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { within } from '../helpers/promises.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { until } from '../durability/chaos-lib.js';

const KEY = 'worker-key-1';

/** A worker tool that counts its runs. */
function countingTool(name: string, answer: string) {
  const runs: unknown[] = [];
  const tool: WorkerTool = {
    name,
    description: 'Counts its runs.',
    input_schema: { type: 'object', properties: {} },
    run: (async (input: unknown) => {
      runs.push(input);
      return answer;
    }) as WorkerTool['run'],
  };
  return { tool, runs };
}

const ofType = (events: Event[], type: string) => events.filter((e) => e.type === type);

/** A worker tool that never ends, whatever its signal says; `signals` has each run's signal. */
function stuckTool(name: string) {
  const signals: AbortSignal[] = [];
  const started = Promise.withResolvers<void>();
  const tool: WorkerTool = {
    name,
    description: 'Never ends.',
    input_schema: { type: 'object', properties: {} },
    run: ((_input: unknown, context?: { signal: AbortSignal }) => {
      if (context) signals.push(context.signal);
      started.resolve();
      return new Promise(() => {});
    }) as WorkerTool['run'],
  };
  return { tool, signals, started: started.promise };
}

describe('ToolWorker (typed client)', { timeout: 120_000 }, () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}` } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('stop() while a claim is answered: the call it leased runs and is submitted before stop() resolves', async () => {
    const { tool, runs } = countingTool('stop_probe', 'probed');
    let stopped: Promise<void> | undefined;
    let stopCalled!: () => void;
    const stopping = new Promise<void>((r) => (stopCalled = r));
    const worker: ToolWorker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: KEY,
      tools: [tool],
      workerId: 'stopper',
      waitMs: 10_000,
      // stop() lands between the service leasing the call (the claim's answer has come, with a task in it) and the
      // worker reading that answer: the window in which aborting the claim would lose the call.
      fetch: async (req) => {
        const res = await fetch(req);
        const length = Number(res.headers.get('content-length'));
        if (req.url.endsWith('/v1/tool-tasks/claim') && res.ok && !stopped) {
          assert.ok(length > 0, 'the claim answer has a content-length');
          if (length > '{"tasks":[]}'.length) {
            stopped = worker.stop();
            stopCalled();
          }
        }
        return res;
      },
    });
    await worker.start();
    h.fake.enqueue(toolCalls([toolUse('stop_probe', {}, 'toolu_stop')]), text('Done.'));
    const s = await h.client.createSession({ input: 'probe', tools: ['stop_probe'] });
    await stopping;
    await stopped;
    assert.equal(runs.length, 1, 'the leased call ran');
    assert.equal(worker.running, 0);
    const done = await h.client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 30_000 });
    assert.equal(done.status, 'idle');
    const events = (await h.client.listEvents(s.id, { limit: 500 })).data;
    assert.deepEqual(
      ofType(events, 'tool.started').map((e) => (e.data as { attempt: number }).attempt),
      [1],
    );
    assert.deepEqual(ofType(events, 'tool_task.retried'), []);
  });

  it('start() twice at once: one claim loop, so no more calls run at once than `concurrency`', async () => {
    // Each start ran its own claim loop: two claims in flight at once, and 3 calls at once with concurrency 2.
    let claimsOut = 0;
    let mostClaimsOut = 0;
    let active = 0;
    let mostActive = 0;
    const twoRunning = Promise.withResolvers<void>();
    const gate = Promise.withResolvers<void>();
    const tool: WorkerTool = {
      name: 'pair_probe',
      description: 'Runs until let go.',
      input_schema: { type: 'object', properties: {} },
      run: (async () => {
        mostActive = Math.max(mostActive, ++active);
        if (active >= 2) twoRunning.resolve();
        await gate.promise;
        active--;
        return 'paired';
      }) as WorkerTool['run'],
    };
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: KEY,
      tools: [tool],
      workerId: 'pair',
      concurrency: 2,
      waitMs: 2000,
      fetch: async (req) => {
        const claim = req.url.endsWith('/v1/tool-tasks/claim');
        if (claim) mostClaimsOut = Math.max(mostClaimsOut, ++claimsOut);
        try {
          return await fetch(req);
        } finally {
          if (claim) claimsOut--;
        }
      },
    });
    await Promise.all([worker.start(), worker.start()]);
    try {
      h.fake.enqueue(
        toolCalls([
          toolUse('pair_probe', {}, 'toolu_p1'),
          toolUse('pair_probe', {}, 'toolu_p2'),
          toolUse('pair_probe', {}, 'toolu_p3'),
        ]),
        text('Done.'),
      );
      const s = await h.client.createSession({ input: 'pairs', tools: ['pair_probe'] });
      await twoRunning.promise;
      gate.resolve();
      const done = await h.client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 30_000 });
      assert.equal(done.status, 'idle');
      assert.equal(mostClaimsOut, 1, 'one claim at a time: one loop');
      assert.equal(mostActive, 2, 'at most `concurrency` calls at once');
    } finally {
      await worker.stop();
    }
  });

  it('a stop() during start() wins: the start resolves without claiming, and a start() after it claims', async () => {
    // start() set its loop only after registering: a stop() meanwhile found none and returned, the start then began a
    // loop that ended at once, and every later start() returned early, claiming nothing for ever.
    const { tool, runs } = countingTool('restart_probe', 'again');
    let claims = 0;
    let held = false;
    const registering = Promise.withResolvers<void>();
    const letGo = Promise.withResolvers<void>();
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: KEY,
      tools: [tool],
      workerId: 'restarter',
      waitMs: 2000,
      // The first registration's answer is held until stop() has been called: the stop lands mid-start.
      fetch: async (req) => {
        if (req.url.endsWith('/v1/tool-tasks/claim')) claims++;
        if (req.method !== 'PUT' || held) return fetch(req);
        held = true;
        const res = await fetch(req);
        registering.resolve();
        await letGo.promise;
        return res;
      },
    });
    const started = worker.start();
    await registering.promise;
    const stopped = worker.stop();
    letGo.resolve();
    await within(stopped, 10_000, 'stop() during start()');
    await within(started, 10_000, 'the start stopped');
    assert.equal(claims, 0, 'nothing claimed: the stop won');
    await worker.start();
    try {
      h.fake.enqueue(toolCalls([toolUse('restart_probe', {}, 'toolu_restart')]), text('Done.'));
      const s = await h.client.createSession({ input: 'again', tools: ['restart_probe'] });
      const done = await h.client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 15_000 });
      assert.equal(done.status, 'idle');
      assert.deepEqual(runs, [{}]);
    } finally {
      await worker.stop();
    }
  });

  it('a concurrency above 100 claims at most 100 at a time, and runs the calls', async () => {
    const { tool, runs } = countingTool('wide_probe', 'wide');
    const refused = new AbortController();
    const worker = new ToolWorker({
      baseUrl: h.service.url,
      apiKey: KEY,
      tools: [tool],
      workerId: 'wide',
      concurrency: 150,
      waitMs: 2000,
      // A refused claim is retried for ever: the first one ends the test.
      onError: (err, what) => refused.abort(new Error(`${what}: ${String(err)}`)),
    });
    await worker.start();
    try {
      h.fake.enqueue(toolCalls([toolUse('wide_probe', {}, 'toolu_wide')]), text('Done.'));
      const s = await h.client.createSession({ input: 'wide', tools: ['wide_probe'] });
      const done = await h.client.waitFor(s.id, ['idle', 'failed'], {
        timeoutMs: 30_000,
        signal: refused.signal,
      });
      assert.equal(done.status, 'idle');
      assert.equal(runs.length, 1);
    } finally {
      await worker.stop();
    }
  });
});

describe(
  'ToolWorker (typed client) rides out a service that refuses for a while',
  { timeout: 120_000 },
  () => {
    let h: Harness;
    before(async () => {
      h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, TOOL_TASK_LEASE_MS: '3000' } });
    });
    after(async () => h?.close());
    beforeEach(() => h.fake.reset());

    it('a result refused (503, Retry-After) longer than a lease is sent again while heartbeats hold it: one run', async () => {
      const { tool, runs } = countingTool('blip_probe', 'once');
      let refusedResults = 0;
      const worker = new ToolWorker({
        baseUrl: h.service.url,
        apiKey: KEY,
        tools: [tool],
        waitMs: 2000,
        // A proxy in front of the service answers its first 8 result posts 503 (a deploy): 8 s or more, well past a lease.
        fetch: async (req) => {
          if (req.url.endsWith('/result') && refusedResults < 8) {
            refusedResults++;
            return new Response('{"error":{"code":"store_unavailable","message":"deploying"}}', {
              status: 503,
              headers: { 'content-type': 'application/json', 'retry-after': '1' },
            });
          }
          return fetch(req);
        },
      });
      await worker.start();
      try {
        h.fake.enqueue(toolCalls([toolUse('blip_probe', {}, 'toolu_blip')]), text('Done.'));
        const s = await h.client.createSession({ input: 'blip', tools: ['blip_probe'] });
        const done = await h.client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 60_000 });
        assert.equal(done.status, 'idle');
        assert.equal(refusedResults, 8);
        assert.equal(runs.length, 1, 'the tool ran once');
        const events = (await h.client.listEvents(s.id, { limit: 500 })).data;
        assert.deepEqual(ofType(events, 'tool_task.retried'), []);
      } finally {
        await worker.stop();
      }
    });

    it('a tool that ignores its signal frees its slot abortGraceMs after its call is cancelled, and stop() resolves', async () => {
      // The slot was held for ever: with concurrency 1 no other call ran, and stop() never resolved.
      const stuck = stuckTool('stuck_probe');
      const { tool: quick, runs } = countingTool('quick_probe', 'quick');
      const told: unknown[] = [];
      const worker = new ToolWorker({
        baseUrl: h.service.url,
        apiKey: KEY,
        tools: [stuck.tool, quick],
        concurrency: 1,
        waitMs: 1000,
        abortGraceMs: 500,
        onError: (err, what) => void (what === 'tool' && told.push(err)),
      });
      await worker.start();
      try {
        h.fake.enqueue(toolCalls([toolUse('stuck_probe', {}, 'toolu_stuck')]));
        const a = await h.client.createSession({ input: 'stuck', tools: ['stuck_probe'] });
        await stuck.started;
        await h.client.cancelSession(a.id);
        // The next heartbeat is refused 409 task_cancelled: the tool's signal aborts, and half a second later the
        // slot is free for this call.
        h.fake.enqueue(toolCalls([toolUse('quick_probe', {}, 'toolu_quick')]), text('Done.'));
        const b = await h.client.createSession({ input: 'quick', tools: ['quick_probe'] });
        const done = await h.client.waitFor(b.id, ['idle', 'failed'], { timeoutMs: 20_000 });
        assert.equal(done.status, 'idle');
        assert.equal(runs.length, 1);
        assert.equal(stuck.signals[0]?.aborted, true, 'the tool was told');
        assert.equal(told.length, 1);
        assert.match(String(told[0]), /stuck_probe .* its slot is freed and its result will be discarded/);
        assert.equal(worker.running, 0);
      } finally {
        await within(worker.stop(), 10_000, 'stop()');
      }
    });

    it("stop() with a tool that ignores its signal, its call not cancelled, resolves by the tool's timeout_ms + abortGraceMs", async () => {
      const stuck = stuckTool('late_probe');
      const worker = new ToolWorker({
        baseUrl: h.service.url,
        apiKey: KEY,
        tools: [stuck.tool],
        waitMs: 1000,
        abortGraceMs: 500,
        register: { timeout_ms: 1000 },
      });
      await worker.start();
      h.fake.enqueue(toolCalls([toolUse('late_probe', {}, 'toolu_late')]), text('Done.'));
      const s = await h.client.createSession({ input: 'late', tools: ['late_probe'] });
      await stuck.started;
      // The call's deadline is a second after it was queued (before the claim): the worker aborts the tool's signal a
      // second after the claim at the latest, and leaves it half a second later, whatever the heartbeats say.
      await within(worker.stop(), 10_000, 'stop() with a stuck tool');
      assert.equal(stuck.signals[0]?.aborted, true);
      assert.equal(worker.running, 0);
      const done = await h.client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 20_000 });
      assert.equal(done.status, 'idle');
      const [completed] = ofType((await h.client.listEvents(s.id, { limit: 500 })).data, 'tool.completed');
      assert.match(
        String((completed?.data as { content: unknown }).content),
        /no worker answered within 1000 ms/,
      );
    });

    it('a result is sent until the service answers: away longer than a lease, with no sweep, it still takes it', async () => {
      // The worker gave a result up once no heartbeat had held the lease for a whole lease, though a lapsed lease
      // takes a result until the sweep offers the call again, and no sweep runs while the service is down: the call
      // then ran again. Here the service is away for the worker (connections refused, as in a restart) and its sweep
      // held, as a service that is down does not sweep: the result sent once it is back is taken, the tool run once.
      const LEASE = 3000;
      const finish = Promise.withResolvers<void>();
      const started = Promise.withResolvers<void>();
      let runs = 0;
      const tool: WorkerTool = {
        name: 'away_probe',
        description: 'Ends when let go.',
        input_schema: { type: 'object', properties: {} },
        run: (async () => {
          runs++;
          started.resolve();
          await finish.promise;
          return 'done while away';
        }) as WorkerTool['run'],
      };
      let away = false;
      const resultAnswers: number[] = [];
      const resultFailures: number[] = [];
      const worker = new ToolWorker({
        baseUrl: h.service.url,
        apiKey: KEY,
        tools: [tool],
        waitMs: 1000,
        onError: (_err, what) => void (what === 'result' && resultFailures.push(Date.now())),
        fetch: async (req) => {
          if (away) throw new TypeError('fetch failed');
          const res = await fetch(req);
          if (req.url.endsWith('/result')) resultAnswers.push(res.status);
          return res;
        },
      });
      await worker.start();
      const tasks = h.service.app.toolTasks;
      const sweep = tasks.sweep;
      try {
        h.fake.enqueue(toolCalls([toolUse('away_probe', {}, 'toolu_away')]), text('Done.'));
        const s = await h.client.createSession({ input: 'away', tools: ['away_probe'] });
        await started.promise;
        tasks.sweep = async () => {};
        away = true;
        const finished = Date.now();
        finish.resolve();
        // Two leases without an answer, the worker still sending its result.
        await until(
          () => resultFailures.some((t) => t > finished + 2 * LEASE),
          30_000,
          'a result sent two leases after the tool ended',
        );
        away = false;
        const done = await h.client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 30_000 });
        assert.equal(done.status, 'idle');
        assert.deepEqual(resultAnswers, [200]);
        assert.equal(runs, 1, 'the tool ran once');
        const events = (await h.client.listEvents(s.id, { limit: 500 })).data;
        assert.deepEqual(
          ofType(events, 'tool.completed').map((e) => (e.data as { content: unknown }).content),
          ['done while away'],
        );
        assert.deepEqual(ofType(events, 'tool_task.retried'), []);
      } finally {
        away = false;
        tasks.sweep = sweep;
        await worker.stop();
      }
    });

    it("registering keeps a tool's settings the worker does not name; a throwing onError does not stop it", async () => {
      const put = await h.api.as(KEY).req('PUT', '/v1/tools/kept_probe', {
        description: 'old',
        input_schema: { type: 'object', properties: {} },
        runner: { type: 'worker' },
        max_attempts: 1,
        idempotent: true,
      });
      assert.ok(put.status < 300, JSON.stringify(put.body));
      const { tool, runs } = countingTool('kept_probe', 'kept');
      let claims = 0;
      const worker = new ToolWorker({
        baseUrl: h.service.url,
        apiKey: KEY,
        tools: [tool],
        waitMs: 0,
        register: { read_only: true },
        onError: () => {
          throw new Error('a careless callback');
        },
        // The first claim fails (no answer): onError is told, and throws.
        fetch: async (req) => {
          if (req.url.endsWith('/claim') && claims++ === 0) throw new TypeError('fetch failed');
          return fetch(req);
        },
      });
      await worker.start();
      try {
        const got = (await h.api.as(KEY).get('/v1/tools/kept_probe')).body;
        assert.equal(got.description, 'Counts its runs.');
        assert.equal(got.max_attempts, 1);
        assert.equal(got.idempotent, true);
        assert.equal(got.read_only, true);
        h.fake.enqueue(toolCalls([toolUse('kept_probe', {}, 'toolu_kept')]), text('Done.'));
        const s = await h.client.createSession({ input: 'kept', tools: ['kept_probe'] });
        assert.equal(
          (await h.client.waitFor(s.id, ['idle', 'failed'], { timeoutMs: 30_000 })).status,
          'idle',
        );
        assert.equal(runs.length, 1);
        // waitMs 0: a claim that brings nothing is followed by the next a second later at the soonest, not at once.
        const before = claims;
        const t0 = Date.now();
        for (const deadline = Date.now() + 30_000; claims < before + 3;) {
          assert.ok(Date.now() < deadline, 'claims go on');
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
        assert.ok(Date.now() - t0 >= 2000, `3 claims in ${Date.now() - t0} ms`);
      } finally {
        await worker.stop();
      }
    });
  },
);
