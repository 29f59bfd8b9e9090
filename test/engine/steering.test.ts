import '../helpers/test-tools-env.js';
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { Redis } from 'ioredis';
import { IN_FLIGHT_TTL_MS, IdempotencyRecords } from '../../src/store/idempotency.js';
import { idempotencyKey } from '../../src/store/keys.js';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall, toolCalls, toolUse, reply } from '../fake/script.js';
import { checkHistory } from '../../src/history.js';
import {
  ApiError,
  ConflictError,
  RevisionMismatchError,
  type CreateSessionBody,
  type SessionStatus,
} from '../../packages/client/src/index.js';

const blocks = (m: any): any[] =>
  typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content;

describe('steering between turns', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  async function create(body: Partial<CreateSessionBody>) {
    const r = await h.client.api.POST('/v1/sessions', {
      body: { tools: ['calculate_sum', 'get_weather'], ...body },
    });
    assert.equal(r.response.status, 201, JSON.stringify(r.error));
    return r.data!;
  }

  it('queues a follow-up sent while running right after the tool results ("Please be concise.")', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 2, b: 3 }, { delayMs: 300 }), text('5, concisely.'));
    const s = await create({ input: 'Add 2 and 3' });
    await h.fake.waitForRequests(1);
    const q = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Please be concise.' });
    assert.equal(q.status, 202);
    assert.equal(q.body.status, 'running');
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle');
    assert.equal(h.fake.requests.length, 2);
    const sent = h.fake.requests[1]!.messages;
    const last: any = sent.at(-1);
    assert.equal(last.role, 'user');
    assert.deepEqual(
      blocks(last).map((b: any) => b.type),
      ['tool_result', 'text'],
    );
    assert.equal(blocks(last)[1].text, 'Please be concise.');
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.deepEqual(msgs.slice(0, -1), sent);
  });

  it('interrupt aborts the turn in flight, drops its partial reply and sends the follow-up at once', async () => {
    h.fake.enqueue(
      text('A long answer that streams slowly word by word and will be cut.', { eventDelayMs: 100 }),
      text('short'),
    );
    const s = await create({ input: 'Tell me a story' });
    await h.fake.waitForRequests(1);
    const t0 = Date.now();
    const r = await h.api.post(`/v1/sessions/${s.id}/messages`, {
      text: 'Stop, shorter please.',
      interrupt: true,
    });
    assert.equal(r.status, 202);
    await h.fake.waitForRequests(2);
    assert.ok(Date.now() - t0 < 1500, 'sent at once, not after the slow turn');
    const done = await h.api.waitStatus(s.id, 'idle');
    const sent = h.fake.requests[1]!.messages;
    assert.equal(sent.length, 1, 'the partial reply was dropped');
    assert.deepEqual(
      blocks(sent[0]).map((b: any) => b.text),
      ['Tell me a story', 'Stop, shorter please.'],
    );
    assert.equal(done.iteration, 1);
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.length, 2);
    assert.deepEqual(checkHistory(msgs), []);
  });

  it('an interrupt of a turn that continues a thread starts a new thread: no refused continue of the aborted one', async () => {
    h.fake.enqueue(
      text('First answer.'),
      text('A long answer that streams slowly word by word and will be cut.', { eventDelayMs: 100 }),
      text('short'),
    );
    const s = await create({ input: 'Hello' });
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 1);
    const second = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Tell me a story' });
    assert.equal(second.status, 202);
    await h.fake.waitForRequests(2);
    assert.equal(h.fake.requests[1]!.body.thread?.type, 'continue', 'the second turn continues the first');
    const r = await h.api.post(`/v1/sessions/${s.id}/messages`, {
      text: 'Stop, shorter please.',
      interrupt: true,
    });
    assert.equal(r.status, 202);
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2);
    // The aborted request may still be in flight upstream, so a continue of the same reply would be refused
    // (thread_continue_in_flight) and replayed: one wasted request. The turn after an interrupt creates a thread.
    assert.equal(h.fake.requests.length, 3, JSON.stringify(h.fake.requests.map((q) => q.body.thread)));
    const third = h.fake.requests[2]!;
    assert.deepEqual(third.body.thread, { type: 'create' });
    assert.equal(third.messages.length, 3, 'the whole history');
    assert.deepEqual(
      blocks(third.messages[2]).map((b: any) => b.text),
      ['Tell me a story', 'Stop, shorter please.'],
    );
  });

  it('an interrupt while an approved call runs keeps the thread: the reply it continues was whole', async () => {
    h.fake.enqueue(toolCall('sleep', { ms: 30_000 }, { id: 'toolu_sleepy' }), text('Stopped.'));
    const s = await create({ input: 'Sleep a while', tools: ['sleep'], approval: 'always' });
    await h.api.waitStatus(s.id, 'requires_action');
    const approved = await h.api.post(`/v1/sessions/${s.id}/tool-calls/toolu_sleepy`, {
      decision: 'approve',
    });
    assert.equal(approved.status, 202, JSON.stringify(approved.body));
    const started = async () =>
      (await h.service.app.store.events(s.id, '', 1000)).some((e) => e.type === 'tool.started');
    for (const deadline = Date.now() + 10_000; !(await started());) {
      assert.ok(Date.now() < deadline, 'the approved call started');
      await new Promise((r) => setTimeout(r, 20));
    }
    const r = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Never mind.', interrupt: true });
    assert.equal(r.status, 202);
    await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2);
    assert.equal(h.fake.requests.length, 2);
    // The tool step was aborted, not a model request: the stored reply is the thread's end, continued as usual.
    assert.deepEqual(h.fake.requests[1]!.body.thread, {
      type: 'continue',
      previous_message_id: h.fake.requests[0]!.replyId,
    });
  });

  it('calls of a reply cut at max_tokens are answered, not run, and a queued follow-up joins their results', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 2 }, { stop_reason: 'max_tokens', delayMs: 300 }),
      text('Understood.'),
    );
    const s = await create({ input: 'sum' });
    await h.fake.waitForRequests(1);
    await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Never mind.' });
    const done = await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2);
    assert.equal(done.stop_reason, 'end_turn');
    const sent = h.fake.requests[1]!.messages;
    const last = blocks(sent.at(-1));
    assert.equal(last[0].type, 'tool_result');
    assert.equal(last[0].is_error, true);
    assert.match(String(last[0].content), /not run: the reply stopped with max_tokens/);
    assert.equal(last[1].text, 'Never mind.');
    const events = await h.service.app.store.events(s.id, '', 1000);
    assert.equal(events.filter((e) => e.type === 'tool.started').length, 0, 'the cut call never ran');
  });

  it('a server tool call cut by a stop is not kept, so the next message sends a valid request', async () => {
    for (const stop_reason of ['max_tokens', 'refusal', 'model_context_window_exceeded']) {
      h.fake.reset();
      h.fake.enqueue(
        reply(
          [
            { type: 'text', text: 'Searching.' },
            { type: 'server_tool_use', id: 'srvtoolu_cut', name: 'web_search', input: { query: 'x' } },
          ],
          { stop_reason },
        ),
        text('Answered.'),
      );
      const s = await create({
        input: 'search',
        tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      });
      assert.equal((await h.api.waitStatus(s.id, 'idle')).stop_reason, stop_reason);
      const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
      assert.deepEqual(msgs[1], { role: 'assistant', content: [{ type: 'text', text: 'Searching.' }] });
      await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'Go on.' });
      const done = await h.api.waitFor(s.id, (x) => x.status !== 'running' && x.iteration === 2);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      assert.equal(h.fake.requests[1]!.status, 200);
    }
  });

  it('a reply without tool calls does not end the run while a follow-up waits', async () => {
    h.fake.enqueue(text('first answer', { delayMs: 300 }), text('second answer'));
    const s = await create({ input: 'Hi' });
    await h.fake.waitForRequests(1);
    await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'And then?' });
    const done = await h.api.waitStatus(s.id, 'idle');
    assert.equal(done.iteration, 2);
    const sent = h.fake.requests[1]!.messages;
    assert.equal(sent.length, 3);
    assert.equal(blocks(sent[2])[0].text, 'And then?');
  });

  it('retries a max_tokens cut with a doubled budget up to the ceiling', async () => {
    h.fake.enqueue(
      text('cut', { stop_reason: 'max_tokens' }),
      text('cut again', { stop_reason: 'max_tokens' }),
      text('cut at the ceiling', { stop_reason: 'max_tokens' }),
    );
    const s = await create({
      input: 'Write a lot',
      max_tokens: 1000,
      on_max_tokens: { retry: 'double', ceiling: 3000 },
    });
    const done = await h.api.waitStatus(s.id, 'idle');
    assert.deepEqual(
      h.fake.requests.map((r) => r.body.max_tokens),
      [1000, 2000, 3000],
    );
    // each retry sent the same history: the cut replies were dropped
    for (const r of h.fake.requests) assert.equal(r.messages.length, 1);
    assert.equal(done.stop_reason, 'max_tokens');
    assert.equal(done.params.max_tokens, 3000);
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(msgs.length, 2);
    assert.equal(msgs[1].content[0].text, 'cut at the ceiling');
  });

  it('on_tool_error "continue" lets the model handle the error', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 42 }), text('Sorry, that failed.'));
    const s = await create({ input: 'Weather?' });
    const done = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle');
    const result = blocks(h.fake.requests[1]!.messages.at(-1))[0];
    assert.equal(result.type, 'tool_result');
    assert.equal(result.is_error, true);
  });

  it('on_tool_error "fail" stops the session on a tool error and resume runs the tool again', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 42 }));
    const s = await create({ input: 'Weather?', on_tool_error: 'fail' });
    const failed = await h.api.waitStatus(s.id, ['idle', 'failed']);
    assert.equal(failed.status, 'failed');
    assert.equal(failed.error.code, 'tool_failed');
    assert.equal(h.fake.requests.length, 1, 'the error result is not sent to the model');
    // a human fixes it by answering differently: PATCH policy to continue, resume: the tool runs again (fails again),
    // and the model gets the error this time
    await h.api.req('PATCH', `/v1/sessions/${s.id}`, { on_tool_error: 'continue' });
    h.fake.enqueue(text('ok'));
    const r = await h.api.post(`/v1/sessions/${s.id}/resume`);
    assert.equal(r.status, 202);
    const done = await h.api.waitStatus(s.id, 'idle');
    assert.equal(done.error, null);
    assert.equal(blocks(h.fake.requests[1]!.messages.at(-1))[0].is_error, true);
  });

  it('on_tool_error "pause" lets a human replace the failed result before the model sees it', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 42 }), text('thanks'));
    const s = await create({ input: 'Weather?', on_tool_error: 'pause' });
    const paused = await h.api.waitStatus(s.id, ['requires_action', 'idle', 'failed']);
    assert.equal(paused.status, 'requires_action');
    assert.equal(paused.required_action.type, 'review_tool_results');
    const id = paused.required_action.tool_results[0].tool_use_id;
    assert.equal(paused.required_action.tool_results[0].is_error, true);
    const put = await h.api.req('PUT', `/v1/sessions/${s.id}/tool-results/${id}`, { content: 'Sunny, 20°C' });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal(put.body.status, 'requires_action');
    const cont = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(cont.status, 202);
    await h.api.waitStatus(s.id, 'idle');
    const sent = blocks(h.fake.requests[1]!.messages.at(-1))[0];
    assert.equal(sent.content, 'Sunny, 20°C');
    assert.equal(sent.is_error, undefined);
  });

  it('adds cache_control to the newest tool results only', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }),
      toolCall('calculate_sum', { a: 2, b: 2 }),
      text('done'),
    );
    const s = await create({ input: 'sums', cache_tool_results: true });
    await h.api.waitStatus(s.id, 'idle');
    const second = h.fake.requests[1]!.messages;
    assert.deepEqual(blocks(second.at(-1))[0].cache_control, { type: 'ephemeral' });
    // On the message thread the third request sends only the newest results, with their breakpoint.
    const third = h.fake.requests[2]!.body;
    assert.equal(third.thread?.type, 'continue');
    assert.equal(third.messages.length, 1);
    assert.deepEqual(blocks(third.messages[0])[0].cache_control, { type: 'ephemeral' });
    for (const r of h.fake.requests) {
      const marked = r.body.messages.flatMap(blocks).filter((b: any) => b.cache_control);
      assert.ok(marked.length <= 1, 'one tool-results breakpoint per request at most');
    }
    // The stored history (what a new run sends) has the breakpoint on the newest results only.
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.equal(blocks(msgs[2])[0].cache_control, undefined, 'the older results lost their breakpoint');
    assert.deepEqual(blocks(msgs[4])[0].cache_control, { type: 'ephemeral' });
  });

  // The approval, review, PATCH and retry flows go through the typed client (test/helpers/service.ts): typed
  // errors with the contract's codes, and the raw calls (`client.api`) where the status or a header is checked.
  const refusedWith = (status: number, code: string) => (err: unknown) => {
    assert.ok(err instanceof ApiError, String(err));
    assert.equal(err.status, status, `${err.code}: ${err.message}`);
    assert.equal(err.code, code);
    return true;
  };
  const wait = (id: string, status: SessionStatus | SessionStatus[]) =>
    h.client.waitFor(id, status, { timeoutMs: 10_000 });

  it('approval with an edited input: the model sees the call that ran and its result', async () => {
    h.fake.enqueue(
      toolCalls([toolUse('get_weather', { location: 'Paris' }), toolUse('calculate_sum', { a: 1, b: 2 })]),
    );
    const s = await create({ input: 'Weather and sum', approval: ['get_weather'] });
    const waiting = await wait(s.id, ['requires_action', 'idle', 'failed']);
    assert.equal(waiting.required_action!.type, 'approve_tool_calls');
    assert.equal(waiting.required_action!.tool_calls.length, 1);
    const call = waiting.required_action!.tool_calls[0]!;
    assert.equal(call.name, 'get_weather');
    // the auto-approved server call already ran
    assert.equal(waiting.required_action!.tool_results.length, 1);
    h.fake.enqueue(text('Berlin it is.'));
    const d = await h.client.api.POST('/v1/sessions/{id}/tool-calls/{tool_use_id}', {
      params: { path: { id: s.id, tool_use_id: call.id } },
      body: { decision: 'approve', input: { location: 'Berlin' } },
    });
    assert.equal(d.response.status, 202, JSON.stringify(d.error));
    await assert.rejects(h.client.decideToolCall(s.id, call.id, { decision: 'deny' }), (err) => {
      assert.ok(err instanceof ConflictError, String(err));
      return true;
    });
    await wait(s.id, 'idle');
    const sent = h.fake.requests[1]!.messages;
    const use = blocks(sent[1]).find((b: any) => b.id === call.id);
    assert.deepEqual(use.input, { location: 'Berlin' });
    const result = blocks(sent[2]).find((b: any) => b.tool_use_id === call.id);
    assert.match(JSON.stringify(result.content), /Berlin/);
    assert.doesNotMatch(JSON.stringify(result.content), /Paris/);
  });

  it('a denial answers the call with an is_error result carrying the reason', async () => {
    h.fake.enqueue(toolCall('get_weather', { location: 'Paris' }), text('ok'));
    const s = await create({ input: 'Weather', approval: 'always' });
    const waiting = await wait(s.id, 'requires_action');
    const id = waiting.required_action!.tool_calls[0]!.id;
    const d = await h.client.api.POST('/v1/sessions/{id}/tool-calls/{tool_use_id}', {
      params: { path: { id: s.id, tool_use_id: id } },
      body: { decision: 'deny', reason: 'not today' },
    });
    assert.equal(d.response.status, 202);
    await wait(s.id, 'idle');
    const result = blocks(h.fake.requests[1]!.messages.at(-1))[0];
    assert.equal(result.is_error, true);
    assert.match(String(result.content), /not today/);
  });

  it('a decision while nothing awaits, or on an unknown call, is a 409 with a precise code', async () => {
    h.fake.enqueue(text('hi'));
    const s = await create({ input: 'Hi' });
    await wait(s.id, 'idle');
    await assert.rejects(
      h.client.decideToolCall(s.id, 'toolu_nope', { decision: 'approve' }),
      refusedWith(409, 'nothing_awaits_approval'),
    );
    await assert.rejects(
      h.client.putToolResult(s.id, 'toolu_nope', { content: 'x' }),
      refusedWith(409, 'nothing_awaits_results'),
    );
    await assert.rejects(h.client.cancelSession(s.id), refusedWith(409, 'session_not_running'));
  });

  it('review: what the model receives is exactly the reviewed content', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 2, b: 2 }), text('fine'));
    const s = await create({ input: 'sum', review_tool_results: true });
    const waiting = await wait(s.id, 'requires_action');
    assert.equal(waiting.required_action!.type, 'review_tool_results');
    const id = waiting.required_action!.tool_results[0]!.tool_use_id;
    assert.equal(waiting.required_action!.tool_results[0]!.content, '4');
    const blocksContent = [{ type: 'text' as const, text: 'four (reviewed)' }];
    const r = await h.client.api.POST('/v1/sessions/{id}/tool-results', {
      params: { path: { id: s.id } },
      body: { results: [{ tool_use_id: id, content: blocksContent }], continue: true },
    });
    assert.equal(r.response.status, 202, JSON.stringify(r.error));
    await wait(s.id, 'idle');
    const sent = blocks(h.fake.requests[1]!.messages.at(-1))[0];
    assert.deepEqual(sent.content, blocksContent);
  });

  it("review: a client's last result of a step with a server call pauses it for review at once, with no run", async () => {
    const lookup = { name: 'lookup', description: 'Look it up.', input_schema: { type: 'object' as const } };
    h.fake.enqueue(
      toolCalls([toolUse('calculate_sum', { a: 2, b: 2 }, 'toolu_rs'), toolUse('lookup', {}, 'toolu_rc')]),
      text('fine'),
    );
    const s = await create({
      input: 'sum and look',
      review_tool_results: true,
      tools: ['calculate_sum', lookup],
    });
    const waiting = await wait(s.id, 'requires_action');
    assert.equal(waiting.required_action!.type, 'submit_tool_results');
    const before = (await h.api.get(`/v1/sessions/${s.id}/events`)).body.data.length;
    const put = await h.api.req('PUT', `/v1/sessions/${s.id}/tool-results/toolu_rc`, { content: 'found' });
    // 200: the session waits on; before, a run started (202, running) only to pause at once.
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal(put.body.status, 'requires_action');
    assert.equal(put.body.required_action.type, 'review_tool_results');
    assert.deepEqual(
      put.body.required_action.tool_results.map((r: { tool_use_id: string }) => r.tool_use_id),
      ['toolu_rs', 'toolu_rc'],
    );
    const events = (await h.api.get(`/v1/sessions/${s.id}/events`)).body.data.slice(before);
    assert.deepEqual(
      events.map((e: { type: string }) => e.type),
      ['tool_result.submitted', 'tool.completed', 'session.status'],
    );
    assert.equal(events[1].data.tool_use_id, 'toolu_rc');
    assert.equal(h.fake.requests.length, 1, 'nothing was sent');
    const go = await h.api.post(`/v1/sessions/${s.id}/continue`);
    assert.equal(go.status, 202, JSON.stringify(go.body));
    assert.equal((await wait(s.id, 'idle')).status, 'idle');
    const sent = blocks(h.fake.requests[1]!.messages.at(-1)).map((b: { content: unknown }) => b.content);
    assert.deepEqual(sent, ['4', 'found']);
  });

  it('PATCH changes params from the next turn on; If-Match guards it', async () => {
    h.fake.enqueue(text('a'));
    const s = await create({ input: 'x' });
    const idle = await wait(s.id, 'idle');
    await assert.rejects(
      h.client.updateSession(s.id, { params: { max_tokens: 77 } }, { ifMatch: 1 }),
      (err) => {
        assert.ok(err instanceof RevisionMismatchError, String(err));
        assert.equal(err.code, 'revision_mismatch');
        assert.equal(err.revision, idle.revision);
        return true;
      },
    );
    const ok = await h.client.api.PATCH('/v1/sessions/{id}', {
      params: { path: { id: s.id } },
      body: { params: { max_tokens: 77, system: 'Be brief.' }, metadata: { k: 'v' } },
      headers: { 'if-match': `"${idle.revision}"` },
    });
    assert.equal(ok.response.status, 200, JSON.stringify(ok.error));
    assert.equal(ok.response.headers.get('etag'), `"${ok.data!.revision}"`);
    assert.ok(ok.data!.revision > idle.revision);
    h.fake.enqueue(text('b'));
    await h.client.addMessage(s.id, { text: 'again' });
    await h.client.waitFor(s.id, (x) => x.status === 'idle' && x.iteration === 2, { timeoutMs: 10_000 });
    assert.equal(h.fake.requests[1]!.body.max_tokens, 77);
    assert.equal(h.fake.requests[1]!.system, 'Be brief.');
  });

  it('retry drops the last reply and sends that turn again with new params', async () => {
    h.fake.enqueue(text('too short', { stop_reason: 'max_tokens' }), text('complete answer'));
    const s = await create({ input: 'Essay', max_tokens: 100 });
    await wait(s.id, 'idle');
    const running = await h.client.api.POST('/v1/sessions/{id}/retry', {
      params: { path: { id: s.id } },
      body: { params: { max_tokens: 500 } },
    });
    assert.equal(running.response.status, 202, JSON.stringify(running.error));
    const done = await h.client.waitFor(s.id, (x) => x.status === 'idle' && x.stop_reason === 'end_turn', {
      timeoutMs: 10_000,
    });
    assert.equal(done.iteration, 1);
    assert.equal(h.fake.requests[1]!.body.max_tokens, 500);
    assert.equal(h.fake.requests[1]!.messages.length, 1);
    const msgs = (await h.client.listMessages(s.id)).data;
    assert.equal(msgs.length, 2);
    assert.equal(blocks(msgs[1])[0].text, 'complete answer');
    // The dropped turn's record went with it (the first iteration: nothing before it is kept).
    const iters = (await h.api.get(`/v1/sessions/${s.id}/iterations`)).body.data;
    assert.deepEqual(
      iters.map((r: { iteration: number; stop_reason: string }) => [r.iteration, r.stop_reason]),
      [[1, 'end_turn']],
    );
  });

  it('fork copies the history up to an iteration', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 1 }),
      toolCall('calculate_sum', { a: 2, b: 2 }),
      text('done'),
    );
    const s = await create({ input: 'sums' });
    await h.api.waitStatus(s.id, 'idle');
    const f = await h.api.post(`/v1/sessions/${s.id}/fork`, { at_iteration: 1 });
    assert.equal(f.status, 201, JSON.stringify(f.body));
    assert.notEqual(f.body.id, s.id);
    assert.equal(f.body.iteration, 1);
    const orig = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    const forked = (await h.api.get(`/v1/sessions/${f.body.id}/messages`)).body.data;
    assert.deepEqual(forked, orig.slice(0, 3));
    const iters = (await h.api.get(`/v1/sessions/${f.body.id}/iterations`)).body.data;
    assert.equal(iters.length, 1);
    h.fake.enqueue(text('forked answer'));
    await h.api.post(`/v1/sessions/${f.body.id}/messages`, { text: 'continue here' });
    await h.api.waitFor(f.body.id, (x) => x.status === 'idle' && x.iteration === 2);
  });

  it('Idempotency-Key: same key and body → same answer; another body → 422', async () => {
    h.fake.setHandler(() => text('ok'));
    const body = { input: 'idem', tools: [] };
    const a = await h.api.post('/v1/sessions', body, { 'idempotency-key': 'k-1' });
    const b = await h.api.post('/v1/sessions', body, { 'idempotency-key': 'k-1' });
    assert.equal(a.status, 201);
    assert.equal(b.status, 201);
    assert.equal(b.body.id, a.body.id);
    assert.equal(b.headers.get('idempotent-replayed'), 'true');
    const c = await h.api.post('/v1/sessions', { ...body, input: 'other' }, { 'idempotency-key': 'k-1' });
    assert.equal(c.status, 422);
    assert.equal(c.body.error.code, 'idempotency_key_reused');
    await h.api.waitStatus(a.body.id, 'idle');
  });

  it('Idempotency-Key: a key left in progress by a process that died frees itself within the in-flight TTL', async () => {
    h.fake.setHandler(() => text('ok'));
    const body = { input: 'idem-dead', tools: [] };
    const first = await h.api.post('/v1/sessions', body, { 'idempotency-key': 'k-first' });
    assert.equal(first.status, 201);
    const r = new Redis(h.redis.url);
    try {
      const recordKey = (k: string) =>
        idempotencyKey('default', createHash('sha256').update(k).digest('base64url'));
      const done = JSON.parse((await r.get(recordKey('k-first')))!);
      // What a process killed between its reservation and its answer leaves: the request's pending record.
      const records = new IdempotencyRecords(r, 86_400, 67_108_864);
      assert.ok(await records.reserve(recordKey('k-dead'), { state: 'pending', fp: done.fp }));
      const t0 = Date.now();
      const busy = await h.api.post('/v1/sessions', body, { 'idempotency-key': 'k-dead' });
      assert.equal(busy.status, 409);
      assert.equal(busy.body.error.code, 'idempotency_in_progress');
      let retried = busy;
      while (retried.status === 409 && Date.now() - t0 < IN_FLIGHT_TTL_MS + 5_000) {
        await new Promise((resolve) => setTimeout(resolve, 250));
        retried = await h.api.post('/v1/sessions', body, { 'idempotency-key': 'k-dead' });
      }
      assert.equal(retried.status, 201, JSON.stringify(retried.body));
      assert.equal(retried.headers.get('idempotent-replayed'), null, 'run by the retry, not replayed');
      assert.notEqual(retried.body.id, first.body.id);
      // The retry's answer is kept for the whole TTL, not the in-flight lease.
      assert.ok((await r.ttl(recordKey('k-dead'))) > 3600);
      await h.api.waitStatus(retried.body.id, 'idle');
    } finally {
      r.disconnect();
    }
    await h.api.waitStatus(first.body.id, 'idle');
  });

  it('200 follow-ups from parallel clients all land exactly once, in queueing order, none left queued', async () => {
    let n = 0;
    // several paced tool turns, then plain replies for each follow-up turn
    h.fake.setHandler(() =>
      n++ < 4 ? toolCall('calculate_sum', { a: n, b: 1 }, { eventDelayMs: 5 }) : text(`reply ${n}`),
    );
    const s = await create({ input: 'start', max_iterations: 1000 });
    const posted: string[] = [];
    const revs: number[] = [];
    await Promise.all(
      Array.from({ length: 8 }, async (_, worker) => {
        for (let i = 0; i < 25; i++) {
          const t = `follow-up ${worker}-${i}`;
          const r = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: t });
          assert.ok(r.status === 202 || r.status === 200, JSON.stringify(r.body));
          posted.push(t);
          revs.push(r.body.revision);
        }
      }),
    );
    const done = await h.api.waitFor(s.id, (x) => x.status === 'idle', 30_000);
    assert.equal(done.status, 'idle');
    const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
    assert.deepEqual(checkHistory(msgs), []);
    const texts = msgs
      .filter((m: any) => m.role === 'user')
      .flatMap((m: any) => blocks(m))
      .filter((b: any) => b.type === 'text' && b.text.startsWith('follow-up'))
      .map((b: any) => b.text);
    assert.equal(texts.length, 200);
    assert.equal(new Set(texts).size, 200);
    // the queue order is the order the store accepted them: per worker, its posts are in order
    for (let w = 0; w < 8; w++) {
      const mine = texts.filter((t: string) => t.startsWith(`follow-up ${w}-`));
      assert.deepEqual(
        mine,
        Array.from({ length: 25 }, (_, i) => `follow-up ${w}-${i}`),
      );
    }
    // the events log records the queueing order; the history has the same order
    const ev = await h.service.app.store.events(s.id, '', 100_000);
    const queued = ev
      .filter((e) => e.type === 'message.queued')
      .map((e) => JSON.parse(e.data).message.content[0].text);
    assert.deepEqual(texts, queued);
    assert.equal(await h.service.app.store.queueLength(s.id), 0);
  });

  it('a follow-up posted at the moment a run ends either joins that run or starts the next, never neither', async () => {
    h.fake.setHandler(() => text('an answer', { eventDelayMs: 3 }));
    for (let trial = 0; trial < 30; trial++) {
      const s = await create({ input: `end race ${trial}` });
      // Aim at the end of the turn: the reply streams for ~15-25 ms after the request arrives.
      const before = h.fake.requests.length;
      await h.fake.waitForRequests(before + 1);
      await new Promise((r) => setTimeout(r, 5 + Math.random() * 30));
      const r = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: `late ${trial}` });
      assert.equal(r.status, 202, JSON.stringify(r.body));
      const done = await h.api.waitFor(s.id, (x) => x.status === 'idle' && x.iteration >= 1);
      const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
      // The follow-up is in the history and was answered: by the same run, or by the run it started.
      const at = msgs.findIndex(
        (m: any) => m.role === 'user' && blocks(m).some((b: any) => b.text === `late ${trial}`),
      );
      // (A follow-up that lands before the first turn's request is built joins the first user turn: index 0.)
      assert.ok(at >= 0, `trial ${trial}: the follow-up is in the history`);
      assert.equal(msgs.at(-1).role, 'assistant', `trial ${trial}: it was answered`);
      assert.ok(at < msgs.length - 1, `trial ${trial}: an assistant turn follows it`);
      assert.equal(done.iteration, at === 0 ? 1 : 2);
      assert.equal(await h.service.app.store.queueLength(s.id), 0);
    }
  });

  it('cancel at random moments of a streamed turn always leaves a history the upstream accepts', async () => {
    h.fake.setHandler((req) => {
      const last: any = req.messages.at(-1);
      const hasResults =
        Array.isArray(last.content) && last.content.some((b: any) => b.type === 'tool_result');
      return hasResults || Math.random() < 0.3
        ? reply('Some streamed words to be cut short at any point of the stream.', { eventDelayMs: 2 })
        : toolCall('calculate_sum', { a: 1, b: 2 }, { eventDelayMs: 2 });
    });
    for (let trial = 0; trial < 50; trial++) {
      const s = await create({ input: `trial ${trial}` });
      await new Promise((r) => setTimeout(r, Math.random() * 60));
      const c = await h.api.post(`/v1/sessions/${s.id}/cancel`);
      assert.ok([200, 202, 409].includes(c.status), JSON.stringify(c.body));
      // Too late (the run ended, maybe between the route's read and its write): the contract's code.
      if (c.status === 409) assert.equal(c.body.error.code, 'session_not_running', JSON.stringify(c.body));
      const st = await h.api.waitStatus(s.id, ['idle', 'failed']);
      assert.equal(st.status, 'idle');
      const msgs = (await h.api.get(`/v1/sessions/${s.id}/messages`)).body.data;
      assert.deepEqual(checkHistory(msgs), [], `trial ${trial}: ${JSON.stringify(msgs)}`);
      // the next turn is accepted by the (strict) fake
      const before = h.fake.requests.length;
      const m = await h.api.post(`/v1/sessions/${s.id}/messages`, { text: 'next' });
      assert.equal(m.status, 202, JSON.stringify(m.body));
      const after = await h.api.waitStatus(s.id, ['idle', 'failed']);
      assert.equal(after.status, 'idle', `trial ${trial}: ${JSON.stringify(after.error)}`);
      assert.ok(h.fake.requests.length > before);
    }
  });
});
