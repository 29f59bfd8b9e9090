import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { hang, reply, text, textBlock, toolUse } from '../fake/script.js';
import { checkHistory } from '../../src/history.js';
import type { FakeStopReason } from '../../src/offline/wire.js';

/** The SDK runner's rules (contract §7.5): stop reasons. */

const events = async (h: Harness, id: string): Promise<Array<{ type: string; data: any }>> =>
  (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
const history = async (h: Harness, id: string): Promise<any[]> =>
  (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;

const STOPPING: FakeStopReason[] = [
  'end_turn',
  'stop_sequence',
  'max_tokens',
  'refusal',
  'model_context_window_exceeded',
  'a_reason_from_the_future',
];

describe('stop reasons, as the SDK runner', () => {
  let h: Harness;
  before(async () => {
    // A paused turn and its continuation are two assistant messages in a row, which the API combines.
    h = await startHarness({ fake: { strictAlternation: false } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  /** A session whose first reply calls a tool and stops with `reason`: stopped, its call answered, never run. */
  async function stoppedWith(reason: FakeStopReason): Promise<string> {
    h.fake.enqueue(
      reply([textBlock('Let me add.'), toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_stop1')], {
        stop_reason: reason,
      }),
    );
    const r = await h.api.post('/v1/sessions', { input: 'Add 1 and 2', tools: ['calculate_sum'] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(s.stop_reason, reason);
    assert.equal(h.fake.requests.length, 1, `${reason}: no second request`);
    const log = await events(h, r.body.id);
    assert.equal(log.filter((e) => e.type === 'tool.started').length, 0, `${reason}: the tool never ran`);
    const msgs = await history(h, r.body.id);
    assert.equal(msgs.length, 3);
    const result = msgs[2].content[0];
    assert.equal(result.type, 'tool_result');
    assert.equal(result.tool_use_id, 'toolu_stop1');
    assert.equal(result.is_error, true);
    const resultText = typeof result.content === 'string' ? result.content : result.content[0].text;
    assert.match(resultText, /^Error: not run: /);
    return r.body.id;
  }

  for (const reason of STOPPING) {
    it(`${reason} with a tool call: the run stops, the call is answered "not run"; a message goes on`, async () => {
      const id = await stoppedWith(reason);
      h.fake.enqueue(text('Fine.'));
      const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Go on.' });
      assert.equal(m.status, 202, JSON.stringify(m.body));
      const s = await h.api.waitFor(id, (x) => x.status !== 'running' && x.iteration === 2);
      assert.equal(s.status, 'idle', JSON.stringify(s.error));
      assert.equal(h.fake.requests[1]!.status, 200, 'the API took the history');
    });

    it(`${reason} with a tool call: continue is refused, retry sends the turn again`, async () => {
      const id = await stoppedWith(reason);
      const c = await h.api.post(`/v1/sessions/${id}/continue`);
      assert.equal(c.status, 409);
      assert.equal(c.body.error.code, 'nothing_to_continue');
      h.fake.enqueue(text('3.'));
      const r = await h.api.post(`/v1/sessions/${id}/retry`);
      assert.equal(r.status, 202, JSON.stringify(r.body));
      const s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length === 2);
      assert.equal(s.status, 'idle', JSON.stringify(s.error));
      assert.equal(h.fake.requests[1]!.status, 200);
      assert.equal(
        h.fake.requests[1]!.messages.length,
        1,
        'the turn again: the reply and its answer dropped',
      );
      assert.equal((await history(h, id)).length, 2);
    });
  }

  /** A session stopped by `max_iterations: 1` after a `pause_turn` whose server tool call has no result yet. */
  async function pausedAtMaxIterations(
    body: Record<string, unknown> = {},
    usage?: { input_tokens: number; output_tokens: number },
  ): Promise<string> {
    h.fake.enqueue(
      reply(
        [
          textBlock('Searching.'),
          { type: 'server_tool_use', id: 'srvtoolu_p1', name: 'web_search', input: { query: 'x' } },
        ],
        {
          stop_reason: 'pause_turn',
          ...(usage ? { usage } : {}),
        },
      ),
    );
    const r = await h.api.post('/v1/sessions', {
      input: 'Search x',
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      max_iterations: 1,
      ...body,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(s.stop_reason, 'max_iterations');
    return r.body.id;
  }
  /** A session stopped mid pause_turn whose history a PUT then replaced with a finished one. */
  async function pausedThenReplaced(): Promise<string> {
    const id = await pausedAtMaxIterations();
    const put = await h.api.req('PUT', `/v1/sessions/${id}/messages`, {
      messages: [
        { role: 'user', content: 'Search x' },
        { role: 'assistant', content: [textBlock('Found nothing.')] },
      ],
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    return id;
  }

  /** A session created (idle, no records) with a history that ends with an open server call. */
  async function withOpenCall(): Promise<string> {
    const r = await h.api.post('/v1/sessions', {
      start: false,
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      messages: [
        { role: 'user', content: 'Search x' },
        {
          role: 'assistant',
          content: [
            textBlock('Searching.'),
            { type: 'server_tool_use', id: 'srvtoolu_p1', name: 'web_search', input: { query: 'x' } },
          ],
        },
      ],
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id;
  }
  const searchResult = {
    type: 'web_search_tool_result' as const,
    tool_use_id: 'srvtoolu_p1',
    content: [
      { type: 'web_search_result' as const, url: 'https://example.com', title: 'x', encrypted_content: 'e' },
    ],
  };

  it('max_iterations mid pause_turn, then a message: the paused turn is resumed first, then the message', async () => {
    const id = await pausedAtMaxIterations();
    h.fake.enqueue(reply([searchResult, textBlock('Found x.')]), text('Sure.'));
    const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And y?' });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    // The run's one iteration resumes the paused turn; the message joins the history after it.
    let s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length === 2);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(s.stop_reason, 'max_iterations');
    assert.equal(h.fake.requests[1]!.messages.length, 2, 'the continuation: no new user turn yet');
    assert.deepEqual(
      (await history(h, id)).map((x) => x.role),
      ['user', 'assistant', 'assistant', 'user'],
    );
    const c = await h.api.post(`/v1/sessions/${id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length === 3);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    for (const r of h.fake.requests) assert.equal(r.status, 200, JSON.stringify(r.messages));
    assert.equal((await history(h, id)).at(-1).role, 'assistant');
  });

  for (const what of ['a tool change', 'a compaction'] as const) {
    it(`max_iterations mid pause_turn, then ${what} and a message: the paused turn is resumed first`, async () => {
      const id =
        what === 'a compaction'
          ? await pausedAtMaxIterations(
              { compaction: { at_input_tokens: 1000 } },
              { input_tokens: 5000, output_tokens: 10 },
            )
          : await pausedAtMaxIterations();
      if (what === 'a tool change') {
        const p = await h.api.req('PATCH', `/v1/sessions/${id}`, {
          tools: [{ type: 'web_search_20250305', name: 'web_search' }, 'get_weather'],
        });
        assert.equal(p.status, 200, JSON.stringify(p.body));
      }
      h.fake.enqueue(reply([searchResult, textBlock('Found x.')]), text('Sure.'), text('More.'));
      assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And y?' })).status, 202);
      const s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length >= 2);
      assert.equal(s.status, 'idle', JSON.stringify(s.error));
      // The new runner's first request continues the paused turn: the paused reply is its last message (no
      // compaction request, no tool-change message after it).
      const resumed = h.fake.requests[1]!;
      assert.equal(resumed.status, 200, JSON.stringify(resumed.messages));
      const last = resumed.messages.at(-1) as { role: string; content: Array<{ type: string }> };
      assert.equal(last.role, 'assistant');
      assert.ok(last.content.some((b) => b.type === 'server_tool_use'));
      assert.equal(resumed.body.compaction, undefined, 'not a compaction request');
      for (const r of h.fake.requests) assert.equal(r.status, 200, JSON.stringify(r.messages));
    });
  }

  it('max_iterations mid pause_turn: a compaction waits for the paused turn (409), continue resumes it', async () => {
    const id = await pausedAtMaxIterations();
    const c = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(c.status, 409, JSON.stringify(c.body));
    assert.equal(c.body.error.code, 'unanswered_tool_calls');
    assert.equal(h.fake.requests.length, 1, 'no compaction of an open server tool call');
    h.fake.enqueue(reply([searchResult, textBlock('Found x.')]));
    assert.equal((await h.api.post(`/v1/sessions/${id}/continue`)).status, 202);
    await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length === 2);
    const again = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(again.status, 202, JSON.stringify(again.body));
    const done = await h.api.waitFor(id, (x) => x.status !== 'running' && !x.compaction_pending);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    for (const r of h.fake.requests) assert.equal(r.status, 200, JSON.stringify(r.messages));
    assert.ok(h.fake.requests.at(-1)!.body.compaction);
  });

  it('max_iterations mid pause_turn whose server calls have their results: a compaction waits for it too', async () => {
    h.fake.enqueue(
      reply(
        [
          textBlock('Searching.'),
          { type: 'server_tool_use', id: 'srvtoolu_p1', name: 'web_search', input: { query: 'x' } },
          searchResult,
        ],
        { stop_reason: 'pause_turn' },
      ),
    );
    const r = await h.api.post('/v1/sessions', {
      input: 'Search x',
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      max_iterations: 1,
    });
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.stop_reason, 'max_iterations');
    const c = await h.api.post(`/v1/sessions/${r.body.id}/compact`);
    assert.equal(c.status, 409, JSON.stringify(c.body));
    assert.equal(c.body.error.code, 'unanswered_tool_calls');
  });

  it('a history that ends mid pause_turn by its content or not, whatever its records: compact refuses the one, takes the other', async () => {
    // Created with an open server call at its end (no record tells it): refused.
    const c1 = await h.api.post(`/v1/sessions/${await withOpenCall()}/compact`);
    assert.equal(c1.status, 409, JSON.stringify(c1.body));
    assert.equal(c1.body.error.code, 'unanswered_tool_calls');
    // Paused by its record, then its history replaced with a finished one: the record no longer tells of it.
    const id = await pausedThenReplaced();
    const c2 = await h.api.post(`/v1/sessions/${id}/compact`);
    assert.equal(c2.status, 202, JSON.stringify(c2.body));
    const done = await h.api.waitFor(id, (x) => x.status !== 'running' && !x.compaction_pending);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
  });

  it('max_iterations mid pause_turn, then its history replaced with a finished one: a message is a new turn, no continuation', async () => {
    const id = await pausedThenReplaced();
    h.fake.enqueue(text('Sure.'));
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And y?' })).status, 202);
    const s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length >= 2);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(h.fake.requests.length, 2, 'one request: the message');
    const sent = h.fake.requests[1]!.messages.at(-1) as { role: string };
    assert.equal(sent.role, 'user', 'the message, not a continuation of the replaced reply');
  });

  it('a history created ending with an open server call: a message resumes that turn first', async () => {
    const id = await withOpenCall();
    h.fake.enqueue(reply([searchResult, textBlock('Found x.')]), text('Sure.'));
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And y?' })).status, 202);
    const s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length >= 2);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    const first = h.fake.requests[0]!.messages.at(-1) as { role: string };
    assert.equal(first.role, 'assistant', 'the continuation first, no user turn after the open call');
    for (const q of h.fake.requests) assert.equal(q.status, 200, JSON.stringify(q.messages));
  });

  it('max_iterations reached on a paused reply with a message queued: the message waits for the continuation', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    h.fake.enqueue({
      ...reply(
        [
          textBlock('Searching.'),
          { type: 'server_tool_use', id: 'srvtoolu_p1', name: 'web_search', input: { query: 'x' } },
        ],
        { stop_reason: 'pause_turn' },
      ),
      gate,
    });
    const r = await h.api.post('/v1/sessions', {
      input: 'Search x',
      tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      max_iterations: 1,
    });
    const id: string = r.body.id;
    await h.fake.waitForRequests(1);
    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And y?' })).status, 202);
    release();
    const s = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(s.stop_reason, 'max_iterations');
    assert.deepEqual(
      (await history(h, id)).map((x) => x.role),
      ['user', 'assistant'],
      'the message is not put after the paused reply',
    );
    // Continue: the paused turn is resumed, then the message joins.
    h.fake.enqueue(reply([searchResult, textBlock('Found x.')]), text('Sure.'));
    assert.equal((await h.api.post(`/v1/sessions/${id}/continue`)).status, 202);
    await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length >= 2);
    assert.equal((h.fake.requests[1]!.messages.at(-1) as { role: string }).role, 'assistant');
    for (const q of h.fake.requests) assert.equal(q.status, 200, JSON.stringify(q.messages));
  });

  it('max_iterations mid pause_turn: continue resumes it; retry sends it again', async () => {
    const id = await pausedAtMaxIterations();
    h.fake.enqueue(reply([searchResult, textBlock('Found x.')]));
    const c = await h.api.post(`/v1/sessions/${id}/continue`);
    assert.equal(c.status, 202, JSON.stringify(c.body));
    let s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length === 2);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(s.stop_reason, 'end_turn');
    assert.equal(h.fake.requests[1]!.status, 200);

    const id2 = await pausedAtMaxIterations();
    h.fake.enqueue(reply([textBlock('Again.')]));
    const r = await h.api.post(`/v1/sessions/${id2}/retry`);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    s = await h.api.waitFor(id2, (x) => x.status !== 'running' && h.fake.requests.length === 4);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(h.fake.requests[3]!.status, 200);
    assert.equal(h.fake.requests[3]!.messages.length, 1);
  });

  for (const how of ['cancel', 'interrupt'] as const) {
    it(`${how} while a paused turn is resumed, a message queued: the history stays one the API takes`, async () => {
      h.fake.enqueue(
        reply([{ type: 'server_tool_use', id: 'srvtoolu_q1', name: 'web_search', input: { query: 'x' } }], {
          stop_reason: 'pause_turn',
        }),
        hang(),
      );
      const r = await h.api.post('/v1/sessions', {
        input: 'Search x',
        tools: [{ type: 'web_search_20250305', name: 'web_search' }],
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const id = r.body.id as string;
      await h.fake.waitForRequests(2); // the continuation is in flight
      h.fake.enqueue(
        reply([{ ...searchResult, tool_use_id: 'srvtoolu_q1' }, textBlock('Found x.')]),
        text('And y too.'),
      );
      if (how === 'cancel') {
        assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And y?' })).status, 202);
        assert.equal((await h.api.post(`/v1/sessions/${id}/cancel`)).status, 200);
        const s = await h.api.waitStatus(id, ['idle', 'failed']);
        assert.equal(s.stop_reason, 'cancelled');
        assert.deepEqual(checkHistory(await history(h, id)), []);
        // The next message's run resumes the paused turn first, then the two messages join as one turn.
        assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Go on.' })).status, 202);
      } else {
        const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And y?', interrupt: true });
        assert.equal(m.status, 202, JSON.stringify(m.body));
      }
      const done = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length >= 4);
      assert.equal(done.status, 'idle', JSON.stringify(done.error));
      for (const req of h.fake.requests.slice(2)) assert.equal(req.status, 200, JSON.stringify(req.messages));
      assert.deepEqual(
        (await history(h, id)).map((x) => x.role),
        ['user', 'assistant', 'assistant', 'user', 'assistant'],
      );
    });
  }

  it('the fake refuses a user turn after an unanswered server_tool_use', async () => {
    const { validateConversation } = await import('../fake/server.js');
    const paused = {
      role: 'assistant',
      content: [{ type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} }],
    };
    assert.doesNotThrow(() => validateConversation([{ role: 'user', content: 'x' }, paused]));
    assert.throws(
      () => validateConversation([{ role: 'user', content: 'x' }, paused, { role: 'user', content: 'y' }]),
      /without a result block/,
    );
  });
});

describe('at most 4 cache breakpoints, thread history included', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('the fake counts breakpoints over the whole threaded conversation and refuses a fifth', async () => {
    const { cacheMarks } = await import('../fake/cache-marks.js');
    const marked = { type: 'text', text: 'x', cache_control: { type: 'ephemeral' } };
    assert.equal(cacheMarks([{ role: 'user', content: [marked, marked] }]), 2);
    assert.equal(
      cacheMarks([{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [marked] }] }]),
      1,
    );
    const post = (body: unknown) =>
      fetch(`${h.fake.url}/v1/messages`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-api-key': 'test-key',
          'anthropic-beta': 'message-threads-2026-08-12',
        },
        body: JSON.stringify(body),
      });
    h.fake.enqueue(text('One.'), text('Two.'));
    const userTurn = (t: string, n: number) => ({
      role: 'user',
      content: Array.from({ length: n }, () => ({ ...marked, text: t })),
    });
    const first = await post({
      model: 'm',
      max_tokens: 10,
      system: [{ ...marked, text: 'sys' }],
      messages: [userTurn('a', 2)],
      thread: { type: 'create' },
    });
    assert.equal(first.status, 200);
    const id = ((await first.json()) as { id: string }).id;
    const second = await post({
      model: 'm',
      max_tokens: 10,
      messages: [userTurn('b', 2)],
      thread: { type: 'continue', previous_message_id: id },
    });
    assert.equal(second.status, 400);
    const err = (await second.json()) as { error: { message: string } };
    assert.equal(err.error.message, 'A maximum of 4 blocks with cache_control may be provided. Found 5.');
  });

  it('more than 4 breakpoints in system and tools alone: refused at create and PATCH (no turn could be sent)', async () => {
    const mark = { cache_control: { type: 'ephemeral' } };
    const system = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ type: 'text', text: `rule ${i}`, ...mark }));
    const five = await h.api.post('/v1/sessions', { input: 'x', start: false, system: system(5) });
    assert.equal(five.status, 400, JSON.stringify(five.body));
    assert.equal(five.body.error.code, 'invalid_request');
    assert.deepEqual(five.body.error.details, { cache_control_breakpoints: 5, max: 4 });
    const four = await h.api.post('/v1/sessions', { input: 'x', start: false, system: system(4) });
    assert.equal(four.status, 201, JSON.stringify(four.body));
    // A server tool of the API's with a marker of its own.
    const tool = { type: 'web_search_20250305', name: 'web_search', ...mark };
    const patched = await h.api.req('PATCH', `/v1/sessions/${four.body.id}`, { tools: [tool] });
    assert.equal(patched.status, 400, JSON.stringify(patched.body));
    assert.equal(patched.body.error.details.cache_control_breakpoints, 5, JSON.stringify(patched.body));

    // A retry with params is checked as a PATCH is, before anything is dropped or sent.
    h.fake.enqueue(text('Done.'));
    const ran = await h.api.post('/v1/sessions', { input: 'x' });
    await h.api.waitStatus(ran.body.id, 'idle');
    const sent = h.fake.requests.length;
    const retried = await h.api.post(`/v1/sessions/${ran.body.id}/retry`, { params: { system: system(5) } });
    assert.equal(retried.status, 400, JSON.stringify(retried.body));
    assert.deepEqual(retried.body.error.details, { cache_control_breakpoints: 5, max: 4 });
    // And so is a compaction edit beside the policy's compaction.
    h.fake.enqueue(text('Done.'));
    const compacting = await h.api.post('/v1/sessions', {
      input: 'x',
      compaction: { at_input_tokens: 100_000 },
    });
    await h.api.waitStatus(compacting.body.id, 'idle');
    const edit = await h.api.post(`/v1/sessions/${compacting.body.id}/retry`, {
      params: { context_management: { edits: [{ type: 'compact_20260112' }] } },
    });
    assert.equal(edit.status, 400, JSON.stringify(edit.body));
    assert.equal(edit.body.error.code, 'invalid_request');
    assert.equal(h.fake.requests.length, sent + 1, 'no retry was sent');
    assert.equal((await h.api.get(`/v1/sessions/${ran.body.id}/messages`)).body.data.length, 2);
  });

  it('a tool added by PATCH with a marker of its own: the next request still holds at most 4 breakpoints', async () => {
    const { cacheMarks } = await import('../fake/cache-marks.js');
    const mark = { cache_control: { type: 'ephemeral' } };
    h.fake.enqueue(text('Noted.'), text('Searched.'));
    const r = await h.api.post('/v1/sessions', {
      messages: [
        { role: 'user', content: ['a', 'b', 'c', 'd'].map((t) => ({ type: 'text', text: t, ...mark })) },
      ],
      tools: ['calculate_sum'],
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await h.api.waitStatus(r.body.id, 'idle');
    const tool = { type: 'web_search_20250305', name: 'web_search', ...mark };
    const p = await h.api.req('PATCH', `/v1/sessions/${r.body.id}`, { tools: ['calculate_sum', tool] });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    await h.api.post(`/v1/sessions/${r.body.id}/messages`, { text: 'Search now.' });
    const s = await h.api.waitFor(r.body.id, (x) => x.status !== 'running' && x.iteration === 2);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    const q = h.fake.requests.at(-1)!;
    assert.equal(q.status, 200);
    assert.ok(
      q.messages.some((m) => m.role === 'system'),
      'the tool_addition',
    );
    assert.ok(cacheMarks(q.messages) + cacheMarks(q.system) + cacheMarks(q.tools) <= 4);
  });

  it('a top-level cache_control (automatic caching) takes one of the 4: counted at create and when capping', async () => {
    const { cacheMarks } = await import('../fake/cache-marks.js');
    const mark = { cache_control: { type: 'ephemeral' } };
    const automatic = { cache_control: { type: 'ephemeral' } };
    const system = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ type: 'text', text: `rule ${i}`, ...mark }));
    const refused = await h.api.post('/v1/sessions', {
      input: 'x',
      start: false,
      system: system(4),
      params: automatic,
    });
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.deepEqual(refused.body.error.details, { cache_control_breakpoints: 5, max: 4 });

    // One system marker, three in the history and the automatic one: the history gives up the oldest of its own.
    h.fake.enqueue(text('Cached.'));
    const r = await h.api.post('/v1/sessions', {
      system: system(1),
      params: automatic,
      messages: ['a', 'b', 'c'].flatMap((t, i) => [
        ...(i > 0 ? [{ role: 'assistant', content: 'Noted.' }] : []),
        { role: 'user', content: [{ type: 'text', text: t, ...mark }] },
      ]),
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, 'idle');
    assert.equal(s.error, null);
    const q = h.fake.requests.at(-1)!;
    assert.equal(q.status, 200);
    assert.equal(cacheMarks(q.messages) + cacheMarks(q.system), 3, 'one slot left for the automatic marker');
  });

  it('markers nested in a document source (in a tool result, in a message) are dropped like any other', async () => {
    const { cacheMarks } = await import('../fake/cache-marks.js');
    const marked = (t: string) => ({ type: 'text', text: t, cache_control: { type: 'ephemeral' } });
    const doc = (n: number) => ({
      type: 'document',
      source: { type: 'content', content: Array.from({ length: n }, (_, i) => marked(`part ${i}`)) },
    });
    h.fake.enqueue(text('Read.'));
    const r = await h.api.post('/v1/sessions', {
      messages: [
        { role: 'user', content: [doc(3), { type: 'text', text: 'Fetch the rest.' }] },
        { role: 'assistant', content: [toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_doc')] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_doc', content: [doc(5)] }] },
      ],
      tools: ['calculate_sum'],
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    const q = h.fake.requests.at(-1)!;
    assert.equal(q.status, 200);
    assert.ok(cacheMarks(q.messages) + cacheMarks(q.system) + cacheMarks(q.tools) <= 4);
    // The stored history keeps what the client sent: only the request's copy lost the markers.
    const m = await h.api.get(`/v1/sessions/${r.body.id}/messages`);
    assert.equal(cacheMarks(m.body.data), 8);
  });

  it('a 7-step tool loop with cache_tool_results: no request holds more than 4 breakpoints', async () => {
    const { cacheMarks } = await import('../fake/cache-marks.js');
    for (let i = 1; i <= 7; i++) h.fake.enqueue(reply([toolUse('calculate_sum', { a: i, b: i })]));
    h.fake.enqueue(text('Done.'));
    const r = await h.api.post('/v1/sessions', {
      input: 'Add things',
      tools: ['calculate_sum'],
      cache_tool_results: true,
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    assert.equal(s.iteration, 8);
    const reqs = h.fake.requests;
    assert.equal(reqs.length, 8);
    for (const q of reqs) {
      assert.equal(q.status, 200);
      assert.ok(cacheMarks(q.messages) + cacheMarks(q.system) + cacheMarks(q.tools) <= 4);
    }
    // The markers still move: the last request's newest results turn carries one.
    const last = reqs.at(-1)!.messages.at(-1)!;
    assert.equal(cacheMarks(last), 1);
    assert.ok(reqs.filter((q) => q.body.thread?.type === 'continue').length >= 4, 'threads still go on');
  });
});

describe('state carried across turns and runs: container, message thread', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('the container of a reply is sent with every later request, in this run and the next', async () => {
    h.fake.enqueue(
      reply([toolUse('calculate_sum', { a: 1, b: 2 })], { container: { id: 'container_123' } }),
      text('3.'),
      text('Still here.'),
    );
    const r = await h.api.post('/v1/sessions', { input: 'Add 1 and 2', tools: ['calculate_sum'] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    await h.api.waitFor(r.body.id, (x) => x.status === 'idle' && x.iteration === 2);
    const m = await h.api.post(`/v1/sessions/${r.body.id}/messages`, { text: 'Again?' });
    assert.equal(m.status, 202);
    await h.api.waitFor(r.body.id, (x) => x.status === 'idle' && x.iteration === 3);
    const reqs = h.fake.requests;
    assert.equal(reqs.length, 3);
    assert.equal(reqs[0]!.body.container, undefined);
    assert.equal(reqs[1]!.body.container, 'container_123', 'the next turn');
    assert.equal(reqs[2]!.body.container, 'container_123', 'the next run');
  });

  it('a chat: each run continues the session thread with the new message only (O(n) bytes)', async () => {
    const n = 10;
    for (let i = 0; i < n; i++) h.fake.enqueue(text(`Answer ${i}.`));
    const r = await h.api.post('/v1/sessions', { input: 'Message 0' });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const id = r.body.id;
    await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === 1);
    for (let i = 1; i < n; i++) {
      const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: `Message ${i}` });
      assert.equal(m.status, 202, JSON.stringify(m.body));
      await h.api.waitFor(id, (x) => x.status === 'idle' && x.iteration === i + 1);
    }
    const reqs = h.fake.requests;
    assert.equal(reqs.length, n);
    assert.deepEqual(reqs[0]!.body.thread, { type: 'create' });
    for (let i = 1; i < n; i++) {
      const q = reqs[i]!;
      assert.equal(q.status, 200);
      assert.deepEqual(q.body.thread, { type: 'continue', previous_message_id: reqs[i - 1]!.replyId });
      assert.equal(q.body.messages.length, 1, `run ${i}: the new message only`);
      assert.equal(q.messages.length, 2 * i + 1, 'the model saw the whole conversation');
    }
    const [second, lastOne] = [reqs[1]!.bytes ?? 0, reqs[n - 1]!.bytes ?? 0];
    assert.ok(second > 0 && lastOne <= 1.5 * second, `${lastOne} vs ${second} bytes`);
    // A rewritten history (retry) starts a new thread.
    h.fake.enqueue(text('Again.'));
    const rt = await h.api.post(`/v1/sessions/${id}/retry`);
    assert.equal(rt.status, 202);
    await h.api.waitFor(id, (x) => x.status === 'idle' && h.fake.requests.length === n + 1);
    const again = h.fake.requests[n]!;
    assert.deepEqual(again.body.thread, { type: 'create' });
    assert.equal(again.body.messages.length, 2 * n - 1);
  });

  it('a lost thread across runs: the SDK replays the whole history', async () => {
    h.fake.enqueue(text('One.'), text('Two.'));
    const r = await h.api.post('/v1/sessions', { input: 'Hi' });
    assert.equal(r.status, 201);
    await h.api.waitFor(r.body.id, (x) => x.status === 'idle' && x.iteration === 1);
    h.fake.forgetThreads();
    const m = await h.api.post(`/v1/sessions/${r.body.id}/messages`, { text: 'Again' });
    assert.equal(m.status, 202);
    const s = await h.api.waitFor(r.body.id, (x) => x.status !== 'running' && x.iteration === 2);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    const reqs = h.fake.requests;
    assert.equal(reqs.length, 3);
    assert.equal(reqs[1]!.body.thread?.type, 'continue');
    assert.equal(reqs[1]!.status, 404);
    assert.equal(reqs[2]!.body.thread?.type, 'create');
    assert.equal(reqs[2]!.body.messages.length, 3);
  });
});
