/**
 * The typed client's `ToolWorker` against a real service: `stop()` while a claim is being answered loses none of the
 * calls that claim leased (they run and are submitted before it resolves), and a concurrency above the service's
 * bound on one claim's `max` (100) still claims.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ToolWorker, type Event, type WorkerTool } from '../../packages/client/src/index.js';
import { text, toolCalls, toolUse } from '../fake/script.js';
import { startHarness, type Harness } from '../helpers/service.js';

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
