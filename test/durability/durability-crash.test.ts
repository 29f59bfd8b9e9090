/**
 * Crash recovery: a service process SIGKILLed mid-turn or mid-tool; another process (or the same one, restarted)
 * resumes the session from its last persisted iteration within the lease TTL plus a few seconds.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Redis } from 'ioredis';
import { text, toolCall } from '../fake/script.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { TEST_TOOLS_MODULE } from '../helpers/test-tools.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, sleep, spawnService, type ServiceProcess } from '../helpers/process.js';
import { connectWs, UpgradeRefused, type WsClient } from '../fixtures/event-clients.js';
import {
  LoopModel,
  leaseOwnerPid,
  lostSince,
  redisClient,
  storedHistory,
  tagged,
  tagOf,
  until,
  startLoop,
  verifyLoopHistory,
} from './chaos-lib.js';

const LEASE_TTL_MS = 2000;
/** Lease TTL + one sweep interval + slack for a loaded CI machine (typically ~2.5 s in all). */
const RECOVERY_BOUND_MS = LEASE_TTL_MS + 6000;

/**
 * The whole suite's bound, against a hang only: each test bounds its own waits. Its tests start and kill processes
 * one after another, and on a machine under load (a CI beside other work) the crash suite took 254 s.
 */
describe('crash recovery (SIGKILL)', { timeout: 600_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let fake: FakeAnthropic;
  let toolLog: string;
  const procs: ServiceProcess[] = [];

  const env = () =>
    serviceEnv(redis.url, fake.url, {
      LEASE_TTL_MS: String(LEASE_TTL_MS),
      SERVER_TOOLS_MODULE: TEST_TOOLS_MODULE,
      TEST_TOOLS_LOG: toolLog,
    });
  const start = (name: string) => spawnService(env(), { name });
  /** Keeps two live processes in `procs`. */
  const ensureTwo = async () => {
    for (let i = procs.length - 1; i >= 0; i--) if (!procs[i]!.running()) procs.splice(i, 1);
    while (procs.length < 2) procs.push(await start(`svc${procs.length}`));
  };
  const byPid = (pid: number | null) => procs.find((p) => p.pid === pid);
  const toolRuns = async (id: string) => {
    const lines = (await readFile(toolLog, 'utf8')).split('\n').filter((l) => l.includes(` ${id} `));
    return {
      starts: lines.filter((l) => l.startsWith('start')).map((l) => Number(l.split(' ')[2])),
      ends: lines.filter((l) => l.startsWith('end')).length,
    };
  };

  before(async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-crash-'));
    toolLog = path.join(dir, 'tools.log');
    await writeFile(toolLog, '');
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    r = redisClient(redis.url);
    await ensureTwo();
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    r?.disconnect();
    await fake?.close();
    await redis?.stop();
  });

  /** Kills the process that holds the session's lease; returns it, the survivor, and when it died. */
  /** Resolves once the event log holds a `stream.event` of `iteration`: a kill then lands mid-turn. */
  const streamingTurn = (id: string, iteration: number) =>
    until(
      async () => {
        const entries = await r.xrevrange(`s:{${id}}:e`, '+', '-', 'COUNT', 50);
        return entries.some(([, fields]) => {
          const field = (name: string) => fields[fields.findIndex((f, i) => i % 2 === 0 && f === name) + 1];
          return field('t') === 'stream.event' && JSON.parse(field('d') ?? '{}').iteration === iteration;
        });
      },
      30_000,
      `turn ${iteration} streaming`,
    );

  /** The session's log as `type:iteration` (turn events) and `type:tool_use_id` (tool events), oldest first. */
  const turnLog = async (id: string) =>
    (await procs.find((p) => p.running())!.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data
      .filter((e: any) => /^(turn\.|tool\.(started|completed)|iteration\.persisted)/.test(e.type))
      .map((e: any) =>
        e.type.startsWith('tool.')
          ? `${e.type}:${e.data.tool_use_id}`
          : `${e.type}:${e.data.iteration}${e.type === 'turn.dropped' ? `:${e.data.reason}` : ''}`,
      );

  async function killOwner(id: string) {
    const pid = await until(() => leaseOwnerPid(r, id), 5000, 'a lease holder');
    const owner = byPid(pid);
    assert.ok(owner, `the lease holder ${pid} is one of our processes`);
    const killedAt = Date.now();
    await owner.kill();
    const survivor = procs.find((p) => p !== owner && p.running())!;
    return { owner, survivor, killedAt };
  }

  it('resumes a session killed mid-turn on another process, from the last persisted iteration', async () => {
    await ensureTwo();
    const model = new LoopModel({ turns: 5, eventDelayMs: 60 });
    fake.setHandler(model.handler);
    const tag = 'midturn';
    const created = await procs[0]!.api.post('/v1/sessions', {
      input: tagged(tag),
      tools: ['calculate_sum'],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    // Turn 3 (two replies persisted) is streaming.
    await until(
      () => model.requestsOf(tag).some((q) => q.messages.filter((m) => m.role === 'assistant').length === 2),
      30_000,
      'turn 3',
    );
    await streamingTurn(id, 3);
    const { survivor, killedAt } = await killOwner(id);
    const atCrash = await storedHistory(r, id);
    assert.equal(atCrash.filter((m) => m.role === 'assistant').length, 2, 'two replies were persisted');

    const resumed = await until(
      () => model.requestsOf(tag, killedAt)[0],
      RECOVERY_BOUND_MS,
      'the resumed turn',
    );
    const recoveryMs = resumed.at - killedAt;
    assert.ok(recoveryMs <= RECOVERY_BOUND_MS, `resumed after ${recoveryMs} ms`);
    assert.deepEqual(resumed.messages, atCrash, 'the resumed turn sends exactly the persisted history');

    const done = await survivor.api.waitStatus(id, ['idle', 'failed'], 40_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    assert.equal(done.iteration, 5);
    const history = (await survivor.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const verdict = verifyLoopHistory(history, model, tag, {
      result: (turn, b) => (b['content'] === String(turn + 2) && !b['is_error'] ? null : JSON.stringify(b)),
    });
    assert.deepEqual(verdict.problems, []);
    assert.equal(lostSince(atCrash, history), 0);
    const iters = (await survivor.api.get(`/v1/sessions/${id}/iterations`)).body.data;
    assert.deepEqual(
      iters.map((i: any) => i.iteration),
      [1, 2, 3, 4, 5],
    );
    assert.equal(await r.get(`s:{${id}}:l`), null, 'no lease left behind');
    // Not due any more: the run's end drops its entry, unless a heartbeat's answer came after the end read its due
    // time (src/store/runs.ts `HeldRun`: the entry then holds another time and is left for the runs' sweep, which
    // drops an entry whose session is not running, at that time: within a lease's TTL). A loaded machine showed it.
    await until(async () => (await r.zscore('runs:due', id)) === null, 5 * LEASE_TTL_MS, 'not due any more');
    const log = await turnLog(id);
    const third = log.indexOf('turn.started:3');
    const dropped = log.slice(third, log.indexOf('turn.started:3', third + 1) + 1);
    // The kill lands mid-stream, or (a loaded machine) after the stream ended and before the commit that stores the
    // turn: then the turn's end news, written ahead of that commit (src/engine/live-news.ts), is in the log too,
    // and the takeover still marks the turn dropped before sending it again.
    const between = dropped.slice(1, -2);
    assert.deepEqual(dropped.slice(-2), ['turn.dropped:3:takeover', 'turn.started:3'], dropped.join(' '));
    assert.equal(dropped[0], 'turn.started:3');
    assert.ok(
      between.length === 0 ||
        (between[0] === 'turn.completed:3' &&
          between.slice(1).every((e: string) => /^tool\.started:toolu_midturn_2_/.test(e))),
      dropped.join(' '),
    );
    console.log(`# mid-turn crash: resumed after ${recoveryMs} ms`);
  });

  it('answers a non-idempotent tool killed mid-run with an is_error "interrupted" result, never runs it again', async () => {
    await ensureTwo();
    const model = new LoopModel({ turns: 2, call: () => ({ name: 'sleep', input: { ms: 8000 } }) });
    fake.setHandler(model.handler);
    const tag = 'midtool';
    const created = await procs[1]!.api.post('/v1/sessions', { input: tagged(tag), tools: ['sleep'] });
    const id = created.body.id as string;
    const callId = await until(() => model.sent.find((s) => s.tag === tag)?.key, 20_000, 'the tool call');
    await until(async () => (await toolRuns(callId)).starts.length === 1, 20_000, 'the tool to start');
    const { survivor, killedAt } = await killOwner(id);

    const done = await survivor.api.waitStatus(id, ['idle', 'failed'], RECOVERY_BOUND_MS + 15_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const resumed = model.requestsOf(tag, killedAt)[0]!;
    assert.ok(resumed.at - killedAt <= RECOVERY_BOUND_MS, `resumed after ${resumed.at - killedAt} ms`);
    const history = (await survivor.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const result = history[2].content[0];
    assert.equal(result.type, 'tool_result');
    assert.equal(result.tool_use_id, callId);
    assert.equal(result.is_error, true);
    assert.match(JSON.stringify(result.content), /interrupted/);
    assert.deepEqual(verifyLoopHistory(history, model, tag).problems, []);
    const runs = await toolRuns(callId);
    assert.equal(runs.starts.length, 1, 'the non-idempotent tool ran once');
    assert.equal(runs.ends, 0);
  });

  it('runs an idempotent tool killed mid-run again (its turn is sent again)', async () => {
    await ensureTwo();
    const model = new LoopModel({
      turns: 2,
      call: () => ({ name: 'sleep_idempotent', input: { ms: 1500 } }),
    });
    fake.setHandler(model.handler);
    const tag = 'midtoolidem';
    const created = await procs[0]!.api.post('/v1/sessions', {
      input: tagged(tag),
      tools: ['sleep_idempotent'],
    });
    const id = created.body.id as string;
    const callId = await until(() => model.sent.find((s) => s.tag === tag)?.key, 20_000, 'the tool call');
    await until(async () => (await toolRuns(callId)).starts.length === 1, 20_000, 'the tool to start');
    // The tool starts as its `tool.started` (live news, with the turn's reply) is sent, not once it is written: the
    // kill waits for it in the log, so what is checked below is the survivor's mark after the dead turn's events.
    await until(
      async () => (await turnLog(id)).includes(`tool.started:${callId}`),
      20_000,
      'the call started in the log',
    );
    const { owner, survivor } = await killOwner(id);

    const done = await survivor.api.waitStatus(id, ['idle', 'failed'], RECOVERY_BOUND_MS + 15_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    // Calls to idempotent tools are committed with their reply in one round trip, so the reply of the killed turn
    // never landed: the survivor sent the turn again, and the model's new call ran there.
    const history = (await survivor.api.get(`/v1/sessions/${id}/messages`)).body.data;
    const use = history[1].content.find((b: any) => b.type === 'tool_use');
    assert.notEqual(use.id, callId, 'the reply of the killed turn is not in the history');
    const result = history[2].content[0];
    assert.equal(result.is_error, undefined, JSON.stringify(result));
    assert.equal(result.content, 'slept 1500 ms');
    assert.equal(result.tool_use_id, use.id);
    const first = await toolRuns(callId);
    assert.deepEqual(first.starts, [owner.pid], 'the first call started on the killed process only');
    assert.equal(first.ends, 0);
    const again = await toolRuns(use.id);
    assert.deepEqual(again.starts, [survivor.pid], 'the tool ran again on the survivor');
    assert.equal(again.ends, 1);
    // The killed turn's events (its reply, its call started) are in the log; the survivor marked the turn dropped
    // before sending it again, so a follower discards them (the chat stream's reset-step).
    const log = await turnLog(id);
    const resent = log.indexOf('turn.started:1', 1);
    assert.deepEqual(log.slice(0, resent + 1), [
      'turn.started:1',
      'turn.completed:1',
      `tool.started:${callId}`,
      'turn.dropped:1:takeover',
      'turn.started:1',
    ]);
    assert.ok(!log.includes(`tool.completed:${callId}`));
  });

  it('never runs a tool again once its result was persisted', async () => {
    await ensureTwo();
    const model = new LoopModel({
      turns: 2,
      call: () => ({ name: 'sleep', input: { ms: 50 } }),
      // The final turn streams slowly, so the kill lands after the tool result was committed.
      eventDelayMs: 40,
    });
    fake.setHandler(model.handler);
    const tag = 'afterresult';
    const created = await procs[1]!.api.post('/v1/sessions', { input: tagged(tag), tools: ['sleep'] });
    const id = created.body.id as string;
    await until(() => model.requestsOf(tag).length === 2, 20_000, 'the turn after the tool');
    await streamingTurn(id, 2);
    const { survivor, killedAt } = await killOwner(id);
    const atCrash = await storedHistory(r, id);
    assert.equal(atCrash.length, 3, 'the tool result was persisted');

    const done = await survivor.api.waitStatus(id, ['idle', 'failed'], RECOVERY_BOUND_MS + 15_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const resumed = model.requestsOf(tag, killedAt)[0]!;
    assert.deepEqual(resumed.messages, atCrash);
    const history = (await survivor.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.deepEqual(verifyLoopHistory(history, model, tag).problems, []);
    assert.equal(history[2].content[0].content, 'slept 50 ms');
    const runs = await toolRuns(history[1].content[0].id);
    assert.equal(runs.starts.length, 1, 'ran once');
    assert.equal(runs.ends, 1);
  });

  it('sends the continuation of a turn the API paused (pause_turn) when the process that got it died', async () => {
    await ensureTwo();
    const tag = 'paused-turn';
    /** The continuations asked for: the first (the owner's) is held until the owner is dead. */
    let continuations = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    fake.setHandler(async (req) => {
      if (!JSON.stringify(req.messages[0]).includes(tag)) return text('unrelated');
      if (req.messages.at(-1)?.role === 'user') return text('Looking it up…', { stop_reason: 'pause_turn' });
      continuations++;
      if (continuations === 1) await gate;
      return text('Here is what I found.');
    });
    try {
      const created = await procs[0]!.api.post('/v1/sessions', { input: tagged(tag) });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const id = created.body.id as string;
      await until(() => continuations === 1, 30_000, "the owner's continuation");
      const atCrash = await storedHistory(r, id);
      assert.deepEqual(
        atCrash.map((m) => m.role),
        ['user', 'assistant'],
        'the paused reply was persisted',
      );
      const { survivor } = await killOwner(id);
      release();
      const done = await survivor.api.waitStatus(id, ['idle', 'failed'], 40_000);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      assert.equal(continuations, 2, 'the survivor sent the continuation again');
      assert.equal(done.stop_reason, 'end_turn');
      const history = (await survivor.api.get(`/v1/sessions/${id}/messages`)).body.data;
      assert.deepEqual(
        history.map((m: any) => m.role),
        ['user', 'assistant', 'assistant'],
      );
      assert.equal(history[2].content[0].text, 'Here is what I found.');
      const iters = (await survivor.api.get(`/v1/sessions/${id}/iterations`)).body.data;
      assert.deepEqual(
        iters.map((i: any) => i.stop_reason),
        ['pause_turn', 'end_turn'],
      );
    } finally {
      release();
    }
  });

  it('a client result stored by a process that died reaches the model once, byte for byte', async () => {
    // The process that takes the result runs one session at a time and is busy with another: the result is stored
    // (in its own field, not in the pending step) and then the process dies before any run commits it.
    await Promise.all(procs.map((p) => p.kill()));
    procs.length = 0;
    const busy = await spawnService({ ...env(), MAX_ACTIVE_RUNS: '1' }, { name: 'busy' });
    procs.push(busy);
    const toolUseId = 'toolu_stored_1';
    const seen: Array<{ tag: string | null; at: number; messages: unknown[] }> = [];
    fake.setHandler((req) => {
      const tag = tagOf(req);
      seen.push({ tag, at: Date.now(), messages: req.messages });
      if (tag === 'hold') return { type: 'hang' };
      return req.messages.some((m) => m.role === 'assistant')
        ? text('Thanks.')
        : toolCall('lookup', { q: 'x' }, { id: toolUseId });
    });
    const lookup = {
      name: 'lookup',
      description: 'Look something up.',
      input_schema: { type: 'object', properties: { q: { type: 'string' } } },
    };
    const created = await busy.api.post('/v1/sessions', { input: tagged('stored'), tools: [lookup] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    await busy.api.waitStatus(id, ['requires_action'], 20_000);
    const hold = await busy.api.post('/v1/sessions', { input: tagged('hold') });
    await until(() => seen.some((q) => q.tag === 'hold'), 10_000, 'the hold turn');

    // Characters JSON encoders disagree on (U+2028, non-ASCII, quotes, an empty array) must reach the model as given.
    const content = [
      { type: 'text', text: 'row "1"\u2028✓ \\ end' },
      { type: 'text', text: 'second', citations: [] },
    ];
    const sent = await busy.api.post(`/v1/sessions/${id}/tool-results`, {
      results: [{ tool_use_id: toolUseId, content }],
    });
    assert.equal(sent.status, 202, JSON.stringify(sent.body));
    const meta = `s:{${id}}`;
    assert.equal(await r.hget(meta, 'status'), 'running');
    assert.equal(await r.get(`s:{${id}}:l`), null, 'no run took it: the process is at its limit');
    const pendingText = (await r.hget(meta, 'pending'))!;
    assert.ok(
      pendingText.includes(toolUseId) && !pendingText.includes('row'),
      'the step is stored without results',
    );
    const block = { type: 'tool_result', tool_use_id: toolUseId, content };
    assert.equal(
      await r.hget(meta, `result:${toolUseId}`),
      JSON.stringify(block),
      'the result, as its block',
    );
    const killedAt = Date.now();
    await busy.kill();
    procs.length = 0;
    await ensureTwo();

    const done = await procs[0]!.api.waitStatus(id, ['idle', 'failed'], 20_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const after = seen.filter((q) => q.tag === 'stored' && q.at >= killedAt);
    assert.equal(after.length, 1, 'one turn after the crash');
    assert.deepEqual(after[0]!.messages.at(-1), { role: 'user', content: [block] });
    // Byte for byte in the store: the results turn is the block the route encoded.
    assert.equal(await r.lindex(`s:{${id}}:m`, 2), JSON.stringify({ role: 'user', content: [block] }));
    assert.deepEqual(
      (await r.hkeys(meta)).filter((f) => f.startsWith('result:')),
      [],
      'the stored results went with the step',
    );
    await procs[0]!.api.post(`/v1/sessions/${hold.body.id}/cancel`, {});
  });

  it('a compaction killed mid-request: the survivor marks it skipped (takeover) before it starts it again', async () => {
    await ensureTwo();
    fake.setHandler(() => text('Noted.'));
    const created = await procs[0]!.api.post('/v1/sessions', { input: 'Remember the number 42.' });
    const id = created.body.id as string;
    await procs[0]!.api.waitStatus(id, 'idle', 20_000);
    // The first compaction request is never answered (its process is killed meanwhile); the one sent again gets
    // the fake's own summary.
    fake.enqueue({
      type: 'message',
      content: [{ type: 'compaction', content: 'The user asked to remember 42.' }],
      hangAfterEvents: 1,
    });
    const compactions = () => fake.requests.filter((q) => q.body.compaction).length;
    assert.equal((await procs[1]!.api.post(`/v1/sessions/${id}/compact`, {})).status, 202);
    await until(() => compactions() === 1, 20_000, 'the compaction request');
    const { survivor } = await killOwner(id);
    const done = await survivor.api.waitFor(
      id,
      (x) => x.status === 'idle' && !x.compaction_pending,
      RECOVERY_BOUND_MS + 15_000,
    );
    assert.equal(done.compactions, 1);
    assert.equal(compactions(), 2);
    const log = (await survivor.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data
      .filter((e: any) => e.type.startsWith('compaction.'))
      .map((e: any) => `${e.type}:${e.data.n}${e.data.reason ? `:${e.data.reason}` : ''}`);
    assert.deepEqual(log, [
      'compaction.started:2',
      'compaction.skipped:2:takeover',
      'compaction.started:2',
      'compaction.completed:2',
    ]);
  });

  it("a killed process's event streams stop counting against TENANT_MAX_STREAMS within seconds", async () => {
    // Two processes of their own, with a quota of 4 streams: 3 followers on one, which is SIGKILLed (no release).
    const quotaEnv = { ...env(), TENANT_MAX_STREAMS: '4' };
    const [doomed, other] = await Promise.all([
      spawnService(quotaEnv, { name: 'streams-doomed' }),
      spawnService(quotaEnv, { name: 'streams-other' }),
    ]);
    const open: WsClient[] = [];
    try {
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push((await other.api.post('/v1/sessions', { start: false })).body.id);
      const followers = await Promise.all(ids.map((id) => connectWs(doomed.url, id)));
      const killedAt = Date.now();
      await doomed.kill();
      await Promise.all(followers.map((c) => c.closed));
      // Every follower reconnects to the other process, retrying a 429 after its Retry-After (scaled down here),
      // as a client does: all are back once the dead process's liveness lapsed, long before its slots' own expiry.
      const retryAfters = new Set<string>();
      for (const id of ids) {
        for (;;) {
          const c = await connectWs(other.url, id).catch((err: unknown) => {
            if (!(err instanceof UpgradeRefused) || err.status !== 429) throw err;
            assert.equal(err.body.error.details.quota, 'TENANT_MAX_STREAMS');
            retryAfters.add(String(err.headers['retry-after']));
            return undefined;
          });
          if (c) {
            open.push(c);
            break;
          }
          assert.ok(Date.now() - killedAt < 15_000, `${open.length} of 3 followers back after 15 s`);
          await sleep(100);
        }
      }
      const back = Date.now() - killedAt;
      assert.ok(back < 15_000, `back after ${back} ms`);
      for (const v of retryAfters) assert.ok(Number(v) >= 1 && Number(v) <= 10, `Retry-After ${v}`);
      // The quota still holds: one more stream fits, a fifth does not.
      open.push(await connectWs(other.url, ids[0]!));
      await assert.rejects(connectWs(other.url, ids[1]!), (err: unknown) => {
        assert.ok(err instanceof UpgradeRefused && err.status === 429, String(err));
        return true;
      });
      console.log(
        `# followers of a killed process back on another after ${back} ms (Retry-After ${[...retryAfters]})`,
      );
    } finally {
      for (const c of open) c.close();
      await Promise.all(open.map((c) => c.closed));
      await Promise.all([doomed.kill(), other.kill()]);
    }
  });

  it('resumes when every process died and one is started again', async () => {
    await ensureTwo();
    const model = new LoopModel({ turns: 4, eventDelayMs: 60 });
    fake.setHandler(model.handler);
    const tag = 'alldead';
    const id = await startLoop(procs[0]!.api, model, tag);
    await streamingTurn(id, 1);
    const killedAt = Date.now();
    await Promise.all(procs.map((p) => p.kill()));
    const atCrash = await storedHistory(r, id);
    const fresh = await start('restarted');
    procs.push(fresh);
    const listeningAt = Date.now();
    const resumed = await until(
      () => model.requestsOf(tag, killedAt)[0],
      RECOVERY_BOUND_MS,
      'the resumed turn',
    );
    assert.deepEqual(resumed.messages, atCrash);
    const done = await fresh.api.waitStatus(id, ['idle', 'failed'], 40_000);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const history = (await fresh.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.deepEqual(verifyLoopHistory(history, model, tag).problems, []);
    assert.equal(lostSince(atCrash, history), 0);
    console.log(
      `# all processes dead: resumed ${resumed.at - killedAt} ms after the kill, ${resumed.at - listeningAt} ms after the restart`,
    );
  });
});
