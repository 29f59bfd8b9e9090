/**
 * `run_tools_eagerly`: calls to idempotent server tools start while the reply streams; every other call waits for the
 * reply. A reply stalled mid-stream (the fake's `hangAfterEvents`) shows what started before the reply ended; then
 * the test interrupts, cancels or SIGKILLs the service there, and checks that a non-idempotent call never ran twice
 * (never, here, before its reply was committed). Service processes run the test-only `sleep` tools (TEST_TOOLS=1),
 * which log each start and end to a file shared by the processes.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Redis } from 'ioredis';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { TOOL_LOOP_TEXT_AFTER, parseScript, text, textBlock, toolCalls, toolUse } from '../fake/script.js';
import { sseEvents } from '../../src/offline/sse-events.js';
import { buildMessage } from '../../src/offline/reply.js';
import type { FakeMessageReply } from '../../src/offline/wire.js';
import { TEST_TOOLS_MODULE } from '../helpers/test-tools.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { leaseOwnerPid, redisClient, until } from '../durability/chaos-lib.js';

const LEASE_TTL_MS = 2000;
const LONG = 'This reply goes on for a while after its tool calls, long enough to matter. '.repeat(4);

/** The number of SSE events of `reply` up to and including the start of content block `block`. */
function eventsThroughStartOf(reply: FakeMessageReply, block: number): number {
  const events = sseEvents(buildMessage(reply, 'm', 0));
  let starts = 0;
  for (let i = 0; i < events.length; i++) {
    if (events[i]!.startsWith('event: content_block_start') && starts++ === block) return i + 1;
  }
  throw new Error(`no block ${block}`);
}

/** A reply calling `calls` then writing a long text, stalled once the text has started (the calls are complete). */
function stalledAfterCalls(calls: ReturnType<typeof toolUse>[]): FakeMessageReply {
  const reply = toolCalls([...calls, textBlock(LONG)]);
  return { ...reply, hangAfterEvents: eventsThroughStartOf(reply, calls.length) };
}

describe('run_tools_eagerly', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let r: Redis;
  let fake: FakeAnthropic;
  let toolLog: string;
  const procs: ServiceProcess[] = [];

  const start = (name: string) =>
    spawnService(
      serviceEnv(redis.url, fake.url, {
        LEASE_TTL_MS: String(LEASE_TTL_MS),
        SERVER_TOOLS_MODULE: TEST_TOOLS_MODULE,
        TEST_TOOLS_LOG: toolLog,
      }),
      { name },
    );
  const ensureTwo = async () => {
    for (let i = procs.length - 1; i >= 0; i--) if (!procs[i]!.running()) procs.splice(i, 1);
    while (procs.length < 2) procs.push(await start(`svc${procs.length}`));
  };
  const api = () => procs[0]!.api;
  /** The pids of the processes where call `id` started, and how many runs of it ended. */
  const runs = async (id: string) => {
    const lines = (await readFile(toolLog, 'utf8')).split('\n').filter((l) => l.includes(` ${id} `));
    return {
      starts: lines.filter((l) => l.startsWith('start')).map((l) => Number(l.split(' ')[2])),
      ends: lines.filter((l) => l.startsWith('end')).length,
    };
  };
  const create = async (body: Record<string, unknown>) => {
    const res = await api().post('/v1/sessions', {
      input: 'Run the tools.',
      tools: ['sleep', 'sleep_idempotent'],
      run_tools_eagerly: true,
      ...body,
    });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    return res.body.id as string;
  };
  const history = async (id: string) => (await api().get(`/v1/sessions/${id}/messages`)).body.data as any[];

  before(async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'toolrunner-eager-'));
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

  it('is a policy: default false, set at create, changed by PATCH', async () => {
    fake.reset();
    const plain = await api().post('/v1/sessions', { input: 'hi', start: false });
    assert.equal(plain.body.run_tools_eagerly, false);
    const id = await create({ start: false });
    assert.equal((await api().get(`/v1/sessions/${id}`)).body.run_tools_eagerly, true);
    const patched = await api().req('PATCH', `/v1/sessions/${id}`, { run_tools_eagerly: false });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal(patched.body.run_tools_eagerly, false);
    const bad = await api().req('PATCH', `/v1/sessions/${id}`, { run_tools_eagerly: 'yes' });
    assert.equal(bad.status, 400);
  });

  it('starts an idempotent call before the reply ends, holds a non-idempotent one; an interrupt drops both', async () => {
    fake.reset();
    // The non-idempotent call comes first: the SDK would start it before the idempotent one, were it not held.
    fake.enqueue(
      stalledAfterCalls([
        toolUse('sleep', { ms: 10 }, 'toolu_int_n'),
        toolUse('sleep_idempotent', { ms: 10 }, 'toolu_int_e'),
      ]),
      text('Stopped, as you asked.'),
    );
    const id = await create({});
    // The reply never ends, so a finished run of the idempotent call started while it streamed.
    await until(async () => (await runs('toolu_int_e')).ends === 1, 20_000, 'the eager call to end');
    assert.deepEqual((await runs('toolu_int_n')).starts, [], 'the non-idempotent call waits for the reply');

    const interrupted = await api().post(`/v1/sessions/${id}/messages`, { text: 'Stop.', interrupt: true });
    assert.ok(interrupted.status < 300, JSON.stringify(interrupted.body));
    const done = await api().waitStatus(id, ['idle', 'failed', 'requires_action'], 20_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.deepEqual((await runs('toolu_int_n')).starts, [], 'the dropped reply never ran its held call');
    const msgs = JSON.stringify(await history(id));
    assert.doesNotMatch(msgs, /toolu_int_/, 'the interrupted reply is dropped');
    assert.match(msgs, /Stopped, as you asked/);
  });

  it('a cancel mid-stream leaves no call run but the idempotent one, and a valid history', async () => {
    fake.reset();
    fake.enqueue(
      stalledAfterCalls([
        toolUse('sleep', { ms: 10 }, 'toolu_can_n'),
        toolUse('sleep_idempotent', { ms: 10 }, 'toolu_can_e'),
      ]),
    );
    const id = await create({});
    await until(async () => (await runs('toolu_can_e')).starts.length === 1, 20_000, 'the eager call');
    const cancelled = await api().post(`/v1/sessions/${id}/cancel`, {});
    assert.ok(cancelled.status < 300, JSON.stringify(cancelled.body));
    const done = await api().waitStatus(id, ['idle', 'failed'], 20_000);
    assert.equal(done.stop_reason, 'cancelled');
    assert.deepEqual((await runs('toolu_can_n')).starts, []);
    const msgs = await history(id);
    assert.equal(msgs.at(-1).role, 'user', 'the history ends with the user turn, no unanswered call');
  });

  it('a mixed reply runs both calls once, results in the model order; tools_ms counts only the wait after the reply', async () => {
    fake.reset();
    fake.enqueue(
      toolCalls([
        toolUse('sleep_idempotent', { ms: 30, label: 'early' }, 'toolu_mix_e'),
        toolUse('sleep', { ms: 5, label: 'late' }, 'toolu_mix_n'),
        textBlock('Working on it.'),
      ]),
      text('Both done.'),
    );
    const id = await create({});
    const done = await api().waitStatus(id, ['idle', 'failed', 'requires_action'], 20_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const msgs = await history(id);
    assert.deepEqual(
      msgs[2].content.map((b: any) => [b.tool_use_id, b.content, b.is_error ?? false]),
      [
        ['toolu_mix_e', 'slept 30 ms (early)', false],
        ['toolu_mix_n', 'slept 5 ms (late)', false],
      ],
    );
    for (const c of ['toolu_mix_e', 'toolu_mix_n']) {
      const ran = await runs(c);
      assert.equal(ran.starts.length, 1, `${c} ran once`);
      assert.equal(ran.ends, 1);
    }
  });

  it('an approval-required call never starts early; it runs once approved', async () => {
    fake.reset();
    fake.enqueue(
      toolCalls([toolUse('sleep_idempotent', { ms: 5 }, 'toolu_apr'), textBlock(LONG)]),
      text('Approved and done.'),
    );
    const id = await create({ approval: ['sleep_idempotent'] });
    const waiting = await api().waitStatus(id, ['requires_action', 'idle', 'failed'], 20_000);
    assert.equal(waiting.status, 'requires_action', JSON.stringify(waiting));
    assert.deepEqual((await runs('toolu_apr')).starts, [], 'not started while it waits for approval');
    const decided = await api().post(`/v1/sessions/${id}/tool-calls/toolu_apr`, { decision: 'approve' });
    assert.ok(decided.status < 300, JSON.stringify(decided.body));
    const done = await api().waitStatus(id, ['idle', 'failed'], 20_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.equal((await runs('toolu_apr')).starts.length, 1);
  });

  it('an eager call that throws is an is_error result under on_tool_error (continue, then fail)', async () => {
    fake.reset();
    fake.enqueue(
      toolCalls([toolUse('sleep_idempotent', { ms: 5, fail: true }, 'toolu_thr_1'), textBlock(LONG)]),
      text('It failed; noted.'),
    );
    const id = await create({});
    const done = await api().waitStatus(id, ['idle', 'failed', 'requires_action'], 20_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const result = (await history(id))[2].content[0];
    assert.equal(result.tool_use_id, 'toolu_thr_1');
    assert.equal(result.is_error, true);
    assert.match(JSON.stringify(result.content), /failed on purpose/);

    fake.enqueue(
      toolCalls([toolUse('sleep_idempotent', { ms: 5, fail: true }, 'toolu_thr_2'), textBlock(LONG)]),
    );
    const failing = await create({ on_tool_error: 'fail' });
    const failed = await api().waitStatus(failing, ['idle', 'failed', 'requires_action'], 20_000);
    assert.equal(failed.status, 'failed', JSON.stringify(failed));
    assert.equal(failed.error.code, 'tool_failed');
    assert.match(failed.error.message, /failed on purpose/);
    assert.equal((await runs('toolu_thr_2')).starts.length, 1);
  });

  it('a crash mid-stream: the survivor sends the turn again, and the non-idempotent side effect happens once', async () => {
    await ensureTwo();
    fake.reset();
    fake.enqueue(
      stalledAfterCalls([
        toolUse('sleep', { ms: 10 }, 'toolu_crash_n1'),
        toolUse('sleep_idempotent', { ms: 10 }, 'toolu_crash_e1'),
      ]),
      // The turn sent again by the survivor: the model calls the same tools again, and this reply completes.
      toolCalls([
        toolUse('sleep', { ms: 10 }, 'toolu_crash_n2'),
        toolUse('sleep_idempotent', { ms: 10 }, 'toolu_crash_e2'),
        textBlock('Again.'),
      ]),
      text('All done.'),
    );
    const id = await create({});
    await until(async () => (await runs('toolu_crash_e1')).ends === 1, 20_000, 'the eager call to end');
    const pid = await until(() => leaseOwnerPid(r, id), 5000, 'a lease holder');
    const owner = procs.find((p) => p.pid === pid);
    assert.ok(owner, `the lease holder ${pid} is one of ours`);
    await owner.kill();
    const survivor = procs.find((p) => p !== owner && p.running())!;

    const done = await survivor.api.waitStatus(
      id,
      ['idle', 'failed', 'requires_action'],
      LEASE_TTL_MS + 30_000,
    );
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const msgs = (await survivor.api.get(`/v1/sessions/${id}/messages`)).body.data as any[];
    assert.doesNotMatch(JSON.stringify(msgs), /toolu_crash_.1/, 'the reply of the killed turn never landed');
    // The non-idempotent tool's side effect: one run in all, on the survivor, of the call that was committed.
    assert.deepEqual((await runs('toolu_crash_n1')).starts, []);
    assert.deepEqual((await runs('toolu_crash_n2')).starts, [survivor.pid]);
    assert.deepEqual(
      (await runs('toolu_crash_e1')).starts,
      [owner.pid],
      'the eager call ran on the killed process',
    );
    assert.equal((await runs('toolu_crash_e2')).ends, 1);
    assert.deepEqual(
      msgs[2].content.map((b: any) => [b.tool_use_id, b.is_error ?? false]),
      [
        ['toolu_crash_n2', false],
        ['toolu_crash_e2', false],
      ],
    );
  });
});

describe('the tool-loop script of the B1 eager variant', () => {
  const request = (assistantTurns: number) => ({
    body: { model: 'm', max_tokens: 8, messages: [] },
    headers: {},
    messages: Array.from({ length: assistantTurns }, () => ({ role: 'assistant' as const, content: 'x' })),
    system: undefined,
    tools: [{ name: 'sleep_idempotent' }],
    stream: true,
    at: 0,
  });
  it('tool-loop:N:tool:ms[:text] calls the tool with {ms}, optionally with a sentence after the call', async () => {
    const last = await parseScript('tool-loop:3:sleep_idempotent:50')(request(0), 0);
    assert.equal(last.type, 'message');
    assert.deepEqual(last.type === 'message' && last.content, [
      { type: 'tool_use', name: 'sleep_idempotent', input: { ms: 50 } },
    ]);
    const after = await parseScript('tool-loop:3:sleep_idempotent:50:text')(request(1), 0);
    assert.deepEqual(after.type === 'message' && after.content.map((b) => b.type), ['tool_use', 'text']);
    assert.deepEqual(after.type === 'message' && after.content[1], textBlock(TOOL_LOOP_TEXT_AFTER));
    const done = await parseScript('tool-loop:3:sleep_idempotent:50:text')(request(2), 0);
    assert.deepEqual(done.type === 'message' && done.content.map((b) => b.type), ['text']);
    assert.throws(() => parseScript('tool-loop:3:sleep:x'), /unknown fake script/);
  });
});
