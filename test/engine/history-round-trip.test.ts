import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { startHarness, type Harness } from '../helpers/service.js';
import { availableTools, hang, reply, text, textBlock, toolCalls, toolUse } from '../fake/script.js';
import { signSummary } from '../../src/offline/compaction-block.js';

/**
 * History in, history out (contract §7.5): every history `GET …/messages` answers — compaction summaries, tool-change
 * `system` messages, `container_upload`, server tool blocks, the MCP connector's blocks, a fallback, calls with a
 * `caller`, consecutive turns of one role — is accepted by create, and the new session sends the same next request.
 */

const TOOLS = ['calculate_sum', { type: 'web_search_20250305', name: 'web_search' }];

/** One stretch of history after a user turn, ending with a user turn; `n` makes its ids unique. */
function stretch(kind: number, n: number, word: string): any[] {
  const user = { role: 'user', content: [{ type: 'text', text: `${word} ${n}` }] };
  switch (kind) {
    case 0: // a plain answer
      return [{ role: 'assistant', content: [{ type: 'text', text: `Answer ${n}.` }] }, user];
    case 1: // a tool call, its result, then a message of its own (two user messages in a row)
      return [
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: `toolu_${n}`, name: 'calculate_sum', input: { a: n, b: 1 } }],
        },
        {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: `toolu_${n}`, content: String(n + 1) }],
        },
        user,
      ];
    case 2: // a paused server tool turn and its continuation (two assistant messages in a row)
      return [
        {
          role: 'assistant',
          content: [
            { type: 'server_tool_use', id: `srvtoolu_${n}`, name: 'web_search', input: { query: word } },
          ],
        },
        {
          role: 'assistant',
          content: [
            {
              type: 'web_search_tool_result',
              tool_use_id: `srvtoolu_${n}`,
              content: [
                {
                  type: 'web_search_result',
                  url: 'https://example.com',
                  title: word,
                  encrypted_content: 'e',
                },
              ],
            },
            { type: 'text', text: `Found ${word}.` },
          ],
        },
        user,
      ];
    case 3: // a tool change the runner told the model of, then a user turn with a container upload
      return [
        { role: 'assistant', content: [{ type: 'text', text: `Noted ${n}.` }] },
        {
          role: 'system',
          content: [
            {
              type: 'tool_addition',
              tool: {
                type: 'tool_definition',
                definition: {
                  name: `lookup_${n}`,
                  description: 'Look up.',
                  input_schema: { type: 'object' },
                },
              },
            },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'container_upload', file_id: `file_${n}` },
            { type: 'text', text: word },
          ],
        },
      ];
    case 5: // the blocks of a reply that moved model, used the MCP connector, and called a tool from code
      return [
        {
          role: 'assistant',
          content: [
            {
              type: 'fallback',
              from: { model: 'claude-a' },
              to: { model: 'claude-b' },
              trigger: { type: 'refusal' },
            },
            { type: 'mcp_tool_listing', mcp_server_name: 'crm', tools: [{ name: 'search' }] },
            {
              type: 'mcp_tool_use',
              id: `mcptoolu_${n}`,
              name: 'search',
              server_name: 'crm',
              input: { q: word },
            },
            {
              type: 'mcp_tool_result',
              tool_use_id: `mcptoolu_${n}`,
              is_error: false,
              content: [{ type: 'text', text: `Row ${n}`, citations: null }],
            },
            {
              type: 'tool_use',
              id: `toolu_c${n}`,
              name: 'calculate_sum',
              input: { a: n, b: 2 },
              caller: { type: 'direct' },
              toolset_name: null,
            },
          ],
        },
        {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: `toolu_c${n}`, content: String(n + 2) }],
        },
        user,
      ];
    default: // a compaction's summary
      return [
        {
          role: 'assistant',
          content: [
            {
              type: 'compaction',
              content: `Summary ${n}`,
              encrypted_content: null,
              signature: signSummary(`Summary ${n}`),
              // As the API returns them when it computed the range's tool changes (sent back unchanged).
              ...(n % 2 === 0 ? { tool_changes: [] } : {}),
            },
          ],
        },
        user,
      ];
  }
}

const historyArb = fc
  .record({
    startsWithSummary: fc.boolean(),
    kinds: fc.array(fc.integer({ min: 0, max: 5 }), { minLength: 1, maxLength: 6 }),
    word: fc.constantFrom('redis', 'tokyo', 'paris'),
  })
  .map(({ startsWithSummary, kinds, word }) => {
    const first = { role: 'user', content: [{ type: 'text', text: `Hello ${word}` }] };
    const head = startsWithSummary ? stretch(4, 0, word).slice(0, 1) : [];
    return [...head, first, ...kinds.flatMap((k, i) => stretch(k, i + 1, word))];
  });

describe('history round trip', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ fake: { strictAlternation: false } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  const create = async (messages: unknown[]) => {
    const r = await h.api.post('/v1/sessions', { messages, tools: TOOLS, start: false });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  };
  const messagesOf = async (id: string) => (await h.api.get(`/v1/sessions/${id}/messages`)).body.data;
  const nextRequest = async (id: string) => {
    const before = h.fake.requests.length;
    h.fake.enqueue(text('Next.'));
    const m = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'And now?' });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    const s = await h.api.waitFor(id, (x) => x.status !== 'running' && h.fake.requests.length > before);
    assert.equal(s.status, 'idle', JSON.stringify(s.error));
    return h.fake.requests[before]!;
  };

  it('every answered history is accepted by create and gives the same next request', async () => {
    await fc.assert(
      fc.asyncProperty(historyArb, async (history) => {
        const a = await create(history);
        const answered = await messagesOf(a);
        assert.deepEqual(answered, history);
        const b = await create(answered);
        assert.deepEqual(await messagesOf(b), answered);
        const [ra, rb] = [await nextRequest(a), await nextRequest(b)];
        assert.equal(ra.status, 200, JSON.stringify(ra.messages));
        assert.equal(rb.status, 200);
        assert.deepEqual(rb.messages, ra.messages);
        assert.deepEqual(rb.tools, ra.tools);
        assert.deepEqual(rb.system, ra.system);
        // And what that run answered is taken back too.
        await create(await messagesOf(b));
      }),
      { numRuns: 15 },
    );
  });

  it("an idle session's history, given back with the default start, makes an idle session: nothing to run", async () => {
    h.fake.enqueue(text('Hello there.'));
    const first = await h.api.post('/v1/sessions', { input: 'Hi', tools: TOOLS });
    assert.equal((await h.api.waitStatus(first.body.id, 'idle')).status, 'idle');
    const history = await messagesOf(first.body.id);
    assert.equal(history.at(-1).role, 'assistant');
    const asked = h.fake.requests.length;
    const copy = await h.api.post('/v1/sessions', { messages: history, tools: TOOLS });
    assert.equal(copy.status, 201, JSON.stringify(copy.body));
    assert.equal(copy.body.status, 'idle');
    assert.deepEqual(await messagesOf(copy.body.id), history);
    // The next message goes on from the whole history, as the first session's would.
    const [ra, rb] = [await nextRequest(first.body.id), await nextRequest(copy.body.id)];
    assert.equal(h.fake.requests.length, asked + 2, 'the copy sent nothing before its message');
    assert.deepEqual(rb.messages, ra.messages);
  });

  it('a blank text block of a reply is not kept (the API refuses it in a request); a run goes on past it', async () => {
    h.fake.reset();
    h.fake.enqueue(
      reply([textBlock('\n\n'), toolUse('calculate_sum', { a: 2, b: 3 }, 'toolu_blank1')]),
      text('5.'),
    );
    const a = await h.api.post('/v1/sessions', { input: 'Add 2 and 3', tools: ['calculate_sum'] });
    const done = await h.api.waitStatus(a.body.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done.error));
    const answered = await messagesOf(a.body.id);
    assert.deepEqual(
      answered[1].content.map((b: { type: string }) => b.type),
      ['tool_use'],
    );
    // Sent whole again (a new session from it): the API takes it.
    const b = await create(answered);
    const next = await nextRequest(b);
    assert.equal(next.status, 200, JSON.stringify(next.messages));
  });

  it('a reply that said nothing is kept as [], taken back, and left out of the next request', async () => {
    for (const said of [reply([]), reply([textBlock('')]), reply([textBlock(' \n')])]) {
      h.fake.reset();
      h.fake.enqueue(said);
      const a = await h.api.post('/v1/sessions', { input: 'Hello' });
      assert.equal((await h.api.waitStatus(a.body.id, 'idle')).status, 'idle');
      const answered = await messagesOf(a.body.id);
      assert.deepEqual(answered.at(-1), { role: 'assistant', content: [] });
      // History out, history in, and the next request is one the API takes (the two user turns combine).
      const b = await create(answered);
      const put = await h.api.req('PUT', `/v1/sessions/${a.body.id}/messages`, { messages: answered });
      assert.equal(put.status, 200, JSON.stringify(put.body));
      for (const id of [a.body.id, b]) {
        const next = await nextRequest(id);
        assert.equal(next.status, 200, JSON.stringify(next.messages));
        assert.deepEqual(
          next.messages.map((m) => m.role),
          ['user', 'user'],
        );
        // The thread ended at the reply that said nothing; the one after it goes on as usual.
        const after = await nextRequest(id);
        assert.equal(after.body.thread?.type, 'continue', JSON.stringify(after.body.thread));
        assert.equal(after.body.messages.length, 1, 'only the new message is sent');
      }
    }
  });

  it('a history whose tools were changed, given with the tools at its end, is sent over the tools before', async () => {
    h.fake.enqueue(text('Noted.'));
    const a = await h.api.post('/v1/sessions', { input: 'Hello', tools: ['get_weather'] });
    await h.api.waitStatus(a.body.id, 'idle');
    assert.equal(
      (await h.api.req('PATCH', `/v1/sessions/${a.body.id}`, { tools: ['calculate_sum'] })).status,
      200,
    );
    const before = await nextRequest(a.body.id);
    assert.ok(
      before.messages.some((m) => m.role === 'system'),
      'the change told to the model',
    );
    // History out, history in: the messages and the session's tools as answered.
    const answered = await messagesOf(a.body.id);
    const { tools } = (await h.api.get(`/v1/sessions/${a.body.id}`)).body;
    assert.deepEqual(tools, ['calculate_sum']);
    const b = await h.api.post('/v1/sessions', { messages: answered, tools, start: false });
    assert.equal(b.status, 201, JSON.stringify(b.body));
    assert.deepEqual(b.body.tools, ['calculate_sum']);
    const next = await nextRequest(b.body.id);
    assert.equal(next.status, 200);
    assert.deepEqual(
      (next.tools as Array<{ name: string }>).map((t) => t.name),
      ['get_weather'],
    );
  });

  it('a history that removed a client tool is taken back with the tools at its end (the definition is gone)', async () => {
    const lookup = {
      name: 'lookup',
      description: 'Look an order up',
      input_schema: { type: 'object', properties: { q: { type: 'string' } } },
    };
    h.fake.enqueue(text('Noted.'));
    const a = await h.api.post('/v1/sessions', { input: 'Hello', tools: [lookup, 'get_weather'] });
    await h.api.waitStatus(a.body.id, 'idle');
    const p = await h.api.req('PATCH', `/v1/sessions/${a.body.id}`, { tools: ['get_weather'] });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    await nextRequest(a.body.id);
    const answered = await messagesOf(a.body.id);
    const { tools } = (await h.api.get(`/v1/sessions/${a.body.id}`)).body;
    assert.deepEqual(tools, ['get_weather']);
    const b = await h.api.post('/v1/sessions', { messages: answered, tools, start: false });
    assert.equal(b.status, 201, JSON.stringify(b.body));
    assert.deepEqual(b.body.tools, ['get_weather']);
    assert.deepEqual(await messagesOf(b.body.id), answered);
    // The API takes the removal only of a tool the request declares: the removed one is declared, by its name.
    const next = await nextRequest(b.body.id);
    assert.equal(next.status, 200);
    assert.deepEqual((next.tools as Array<{ name: string }>).map((t) => t.name).sort(), [
      'get_weather',
      'lookup',
    ]);
    assert.deepEqual([...availableTools(next).keys()], ['get_weather']);
    // A history whose removals work back to more tools than a session may hold: 400, checked once for all.
    const removals = Array.from({ length: 200 }, (_, i) => ({
      type: 'tool_removal',
      tool: { type: 'tool_reference', name: `gone_${i}` },
    }));
    const crafted = [...answered.slice(0, 2), { role: 'system', content: removals }, ...answered.slice(2)];
    const many = await h.api.post('/v1/sessions', { messages: crafted, tools, start: false });
    assert.equal(many.status, 400, JSON.stringify(many.body));
    assert.equal(many.body.error.code, 'invalid_history');
    assert.match(many.body.error.message, /202 tools; a session has at most 128/);
  });
});

describe('PUT /v1/sessions/:id/messages', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());
  const put = (id: string, body: unknown, headers?: Record<string, string>) =>
    h.api.req('PUT', `/v1/sessions/${id}/messages`, body, headers);

  it('replaces the whole history of an idle session; the next run starts a new thread with it', async () => {
    h.fake.enqueue(text('One.'), text('Two.'));
    const r = await h.api.post('/v1/sessions', { input: 'Hi' });
    const s = await h.api.waitFor(r.body.id, (x) => x.status === 'idle' && x.iteration === 1);
    const messages = [
      { role: 'user', content: [{ type: 'text', text: 'Another start' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Another answer.' }] },
      { role: 'user', content: [{ type: 'text', text: 'Then?' }] },
    ];
    const stale = await put(r.body.id, { messages }, { 'if-match': `"${s.revision - 1}"` });
    assert.equal(stale.status, 412, JSON.stringify(stale.body));
    const p = await put(r.body.id, { messages }, { 'if-match': `"${s.revision}"` });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.message_count, 3);
    assert.deepEqual((await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data, messages);
    const log = (await h.api.get(`/v1/sessions/${r.body.id}/events?limit=1000`)).body.data;
    assert.deepEqual(log.find((e: any) => e.type === 'messages.replaced')?.data, { message_count: 3 });
    const retry = await h.api.post(`/v1/sessions/${r.body.id}/retry`);
    assert.equal(retry.status, 409);
    assert.equal(retry.body.error.code, 'nothing_to_retry');
    // Record 1 addressed the history replaced: it shows no reply, and a fork cannot cut the new history at it…
    const rec = (await h.api.get(`/v1/sessions/${r.body.id}/iterations/1`)).body;
    assert.equal(rec.reply, null);
    // …but the history as it is now is the last record's fork (the fork's usage starts at zero, its cost too).
    const f = await h.api.post(`/v1/sessions/${r.body.id}/fork`, { at_iteration: 1 });
    assert.equal(f.status, 201, JSON.stringify(f.body));
    assert.deepEqual((await h.api.get(`/v1/sessions/${f.body.id}/messages`)).body.data, messages);
    assert.equal(f.body.usage.cost_usd, 0);
    const m = await h.api.post(`/v1/sessions/${r.body.id}/messages`, { text: 'Go.' });
    assert.equal(m.status, 202);
    await h.api.waitFor(r.body.id, (x) => x.status === 'idle' && x.iteration === 2);
    const next = h.fake.requests[1]!;
    assert.deepEqual(next.body.thread, { type: 'create' });
    assert.deepEqual(next.messages.slice(0, 2), messages.slice(0, 2));
    // Once a record follows it, record 1 names no point of this history.
    const gone = await h.api.post(`/v1/sessions/${r.body.id}/fork`, { at_iteration: 1 });
    assert.equal(gone.status, 404);
    assert.equal(gone.body.error.code, 'iteration_not_found');
    // Shorter than before too: a history of one message.
    const one = await put(r.body.id, { messages: [messages[0]] });
    assert.equal(one.status, 200, JSON.stringify(one.body));
    assert.equal((await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data.length, 1);
  });

  it('refuses a running session (409), a broken history (400) and an unknown session (404)', async () => {
    h.fake.enqueue(hang());
    const r = await h.api.post('/v1/sessions', { input: 'Hi' });
    await h.api.waitFor(r.body.id, () => h.fake.requests.length === 1);
    const messages = [{ role: 'user', content: 'x' }];
    const busy = await put(r.body.id, { messages });
    assert.equal(busy.status, 409);
    assert.equal(busy.body.error.code, 'session_not_replaceable');
    await h.api.post(`/v1/sessions/${r.body.id}/cancel`);
    await h.api.waitStatus(r.body.id, 'idle');
    const broken = await put(r.body.id, {
      messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'x' }] }],
    });
    assert.equal(broken.status, 400);
    assert.equal(broken.body.error.code, 'invalid_history');
    const empty = await put(r.body.id, { messages: [] });
    assert.equal(empty.status, 400);
    const none = await put('ses_doesnotexist0000', { messages });
    assert.equal(none.status, 404);
  });

  it('replaces the history of a session reviewing tool results (their results dropped), not one awaiting a decision', async () => {
    h.fake.enqueue(toolCalls([toolUse('get_weather', { location: 'Oslo' }, 'toolu_rv1')]));
    const r = await h.api.post('/v1/sessions', {
      input: 'Weather?',
      tools: ['get_weather'],
      review_tool_results: true,
    });
    const s = await h.api.waitStatus(r.body.id, 'requires_action');
    assert.equal(s.required_action.type, 'review_tool_results');
    const messages = [{ role: 'user', content: 'Start over: what is 2 + 2?' }];
    const p = await put(r.body.id, { messages });
    assert.equal(p.status, 200, JSON.stringify(p.body));
    assert.equal(p.body.status, 'idle');
    assert.equal(p.body.required_action, null);
    assert.deepEqual((await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data, [
      { role: 'user', content: [{ type: 'text', text: messages[0]!.content }] },
    ]);

    h.fake.enqueue(toolCalls([toolUse('get_weather', { location: 'Rome' }, 'toolu_rv2')]));
    const q = await h.api.post('/v1/sessions', {
      input: 'Weather?',
      tools: ['get_weather'],
      approval: 'always',
    });
    const w = await h.api.waitStatus(q.body.id, 'requires_action');
    assert.equal(w.required_action.type, 'approve_tool_calls');
    const refused = await put(q.body.id, { messages });
    assert.equal(refused.status, 409);
    assert.equal(refused.body.error.code, 'session_not_replaceable');
  });
});
