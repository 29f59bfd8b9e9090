import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { reply, text } from '../fake/script.js';
import { validateConversation } from '../fake/server.js';

/** Anthropic server tools (web search, …) pass through as definitions; their blocks come back in history and events. */

const webSearch = {
  type: 'web_search_20250305',
  name: 'web_search',
  max_uses: 3,
  allowed_domains: ['example.com'],
  user_location: { type: 'approximate', city: 'Paris', country: 'FR' },
};
const webFetch = { type: 'web_fetch_20250910', name: 'web_fetch', max_uses: 1 };
const strictTool = {
  name: 'lookup',
  description: 'Look something up.',
  input_schema: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] },
  strict: true,
};

const events = async (h: Harness, id: string): Promise<Array<{ type: string; data: any }>> =>
  (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;

describe('Anthropic server tools', () => {
  let h: Harness;
  before(async () => {
    // A paused turn and its continuation are two assistant messages in a row, which the API combines.
    h = await startHarness({ fake: { strictAlternation: false } });
  });
  after(async () => h?.close());
  beforeEach(() => h.fake.reset());

  it('a web search definition reaches the model unchanged; its blocks come back in history and events', async () => {
    const r = await h.api.post('/v1/sessions', {
      input: 'Please search the web for redis streams consumer groups.',
      tools: [webSearch, strictTool, 'calculate_sum'],
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.deepEqual(r.body.tools, [webSearch, strictTool, 'calculate_sum']);
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s));

    const sent: any[] = (h.fake.requests[0]!.body.tools ?? []) as any[];
    assert.deepEqual(
      sent.find((t) => t.name === 'web_search'),
      webSearch,
      'the definition as given',
    );
    assert.deepEqual(
      sent.find((t) => t.name === 'lookup'),
      strictTool,
      'strict passes through',
    );

    const msgs = (await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data;
    assert.equal(msgs.length, 2);
    const blocks: any[] = msgs[1].content;
    assert.deepEqual(
      blocks.map((b) => b.type),
      ['text', 'server_tool_use', 'web_search_tool_result', 'text'],
    );
    const use = blocks[1];
    assert.equal(use.name, 'web_search');
    assert.deepEqual(use.input, { query: 'redis streams consumer groups' });
    assert.equal(blocks[2].tool_use_id, use.id);
    assert.equal(blocks[2].content[0].type, 'web_search_result');

    const log = await events(h, r.body.id);
    const starts = log
      .filter((e) => e.type === 'stream.event' && e.data.event.type === 'content_block_start')
      .map((e) => e.data.event.content_block);
    assert.ok(
      starts.some((b) => b.type === 'server_tool_use' && b.id === use.id),
      'server_tool_use streamed',
    );
    assert.ok(
      starts.some((b) => b.type === 'web_search_tool_result' && b.tool_use_id === use.id),
      'its result streamed',
    );
    const completed = log.find((e) => e.type === 'turn.completed');
    assert.deepEqual(completed?.data.message.content, blocks);
    assert.deepEqual(completed?.data.message.usage.server_tool_use, {
      web_search_requests: 1,
      web_fetch_requests: 0,
    });
    // no tool step: server tool blocks are not calls the service answers
    assert.equal(log.filter((e) => e.type === 'tool.started').length, 0);

    // The history with the server blocks is valid for the next turn (the fake checks it as the API does).
    const m = await h.api.post(`/v1/sessions/${r.body.id}/messages`, { text: 'Thanks. And 2 plus 3?' });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    const s2 = await h.api.waitFor(r.body.id, (x) => x.status === 'idle' && x.iteration >= 3);
    assert.equal(s2.stop_reason, 'end_turn');
    for (const req of h.fake.requests) assert.equal(req.status, 200);
  });

  it('a turn paused with pause_turn is continued: the result arrives in the next reply', async () => {
    const r = await h.api.post('/v1/sessions', {
      input: 'Search the web thoroughly for fencing tokens.',
      tools: [webSearch],
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s));
    assert.equal(s.stop_reason, 'end_turn');
    assert.equal(s.iteration, 2, 'the paused turn and its continuation');
    assert.equal(h.fake.requests.length, 2);
    const second = h.fake.requests[1]!.messages;
    const paused: any = second.at(-1);
    assert.equal(paused.role, 'assistant', 'the continuation request ends with the paused reply');
    assert.equal(paused.content.at(-1).type, 'server_tool_use');

    const msgs = (await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data;
    assert.deepEqual(
      msgs.map((m: any) => m.role),
      ['user', 'assistant', 'assistant'],
    );
    assert.equal(msgs[2].content[0].type, 'web_search_tool_result');
    assert.equal(msgs[2].content[0].tool_use_id, paused.content.at(-1).id);
    const iters = (await h.api.get(`/v1/sessions/${r.body.id}/iterations`)).body.data;
    assert.deepEqual(
      iters.map((i: any) => i.stop_reason),
      ['pause_turn', 'end_turn'],
    );
  });

  it('scripted server blocks with pause_turn, and a web fetch', async () => {
    h.fake.enqueue(
      reply(
        [{ type: 'server_tool_use', id: 'srvtoolu_a1', name: 'web_fetch', input: { url: 'https://a.test' } }],
        {
          stop_reason: 'pause_turn',
        },
      ),
      reply([
        {
          type: 'web_fetch_tool_result',
          tool_use_id: 'srvtoolu_a1',
          content: { type: 'web_fetch_tool_result_error', error_code: 'url_not_accessible' },
        },
        { type: 'text', text: 'The page could not be fetched.' },
      ]),
    );
    const r = await h.api.post('/v1/sessions', { input: 'Read a.test', tools: [webFetch] });
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s));
    const msgs = (await h.api.get(`/v1/sessions/${r.body.id}/messages`)).body.data;
    assert.equal(msgs[2].content[0].content.error_code, 'url_not_accessible');
    // the offline model fetches when asked
    h.fake.enqueue(text('ok'));
    const r2 = await h.api.post('/v1/sessions', { input: 'hello', tools: [webFetch] });
    await h.api.waitStatus(r2.body.id, 'idle');
    const r3 = await h.api.post('/v1/sessions', {
      input: 'Fetch https://example.com/a.html please',
      tools: [webFetch],
    });
    await h.api.waitStatus(r3.body.id, 'idle');
    const m3 = (await h.api.get(`/v1/sessions/${r3.body.id}/messages`)).body.data;
    assert.deepEqual(m3[1].content[1].input, { url: 'https://example.com/a.html' });
    assert.equal(m3[1].content[2].type, 'web_fetch_tool_result');
  });

  it('a history with server blocks is accepted at create, and checked', async () => {
    const good = [
      { role: 'user', content: 'Search redis.' },
      {
        role: 'assistant',
        content: [
          { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'redis' } },
          {
            type: 'web_search_tool_result',
            tool_use_id: 'srvtoolu_1',
            content: [
              { type: 'web_search_result', url: 'https://redis.io', title: 'Redis', encrypted_content: 'x' },
            ],
          },
          { type: 'text', text: 'Redis is a data store.' },
        ],
      },
      { role: 'user', content: 'Thanks.' },
    ];
    const r = await h.api.post('/v1/sessions', { messages: good, tools: [webSearch] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const s = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(s.status, 'idle', JSON.stringify(s));

    const orphan = structuredClone(good);
    (orphan[1]!.content as any[]).shift();
    const bad = await h.api.post('/v1/sessions', { messages: orphan, tools: [webSearch] });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'invalid_history');
    assert.match(bad.body.error.message, /answers no server_tool_use/);

    const unanswered = structuredClone(good);
    (unanswered[1]!.content as any[]).splice(1, 1);
    const bad2 = await h.api.post('/v1/sessions', { messages: unanswered, tools: [webSearch] });
    assert.equal(bad2.status, 400);
    assert.equal(bad2.body.error.code, 'invalid_history');

    const inUser = [{ role: 'user', content: [good[1]!.content[0]] }];
    const bad3 = await h.api.post('/v1/sessions', { messages: inUser, tools: [webSearch] });
    assert.equal(bad3.status, 400);
    assert.equal(bad3.body.error.code, 'invalid_request');
  });

  it('definitions are checked: known types, their names, bounded size; memory only as "memory"', async () => {
    const refused = async (tools: unknown[], pattern: RegExp) => {
      const r = await h.api.post('/v1/sessions', { input: 'hi', tools });
      assert.equal(r.status, 400, JSON.stringify(r.body));
      assert.equal(r.body.error.code, 'invalid_request');
      assert.match(JSON.stringify(r.body.error), pattern);
    };
    await refused([{ type: 'web_search_29990101', name: 'web_search' }], /unknown Anthropic tool type/);
    await refused([{ type: 'web_search_20250305', name: 'search' }], /named \\"web_search\\"/);
    await refused([{ type: 'memory_20250818', name: 'memory' }], /string \\"memory\\"/);
    await refused(
      [{ ...webSearch, allowed_domains: Array.from({ length: 2000 }, (_, i) => `d${i}.example.com`) }],
      /at most 16384/,
    );
    const dup = await h.api.post('/v1/sessions', { input: 'hi', tools: [webSearch, webSearch] });
    assert.equal(dup.status, 400);
    assert.equal(dup.body.error.code, 'duplicate_tool');
    // nothing was sent upstream
    assert.equal(h.fake.requests.length, 0);
  });

  it('client-run Anthropic tools (bash) wait for a client result like a client tool', async () => {
    h.fake.enqueue(
      reply([{ type: 'tool_use', id: 'toolu_b1', name: 'bash', input: { command: 'ls' } }]),
      text('Listed.'),
    );
    const r = await h.api.post('/v1/sessions', {
      input: 'List files',
      tools: [{ type: 'bash_20250124', name: 'bash' }],
    });
    const s = await h.api.waitStatus(r.body.id, ['requires_action', 'idle', 'failed']);
    assert.equal(s.status, 'requires_action', JSON.stringify(s));
    assert.equal(s.required_action.type, 'submit_tool_results');
    const sub = await h.api.post(`/v1/sessions/${r.body.id}/tool-results`, {
      results: [{ tool_use_id: 'toolu_b1', content: 'a.txt' }],
    });
    assert.equal(sub.status, 202, JSON.stringify(sub.body));
    const done = await h.api.waitStatus(r.body.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle');
    assert.deepEqual(h.fake.requests[0]!.body.tools, [{ type: 'bash_20250124', name: 'bash' }]);
  });
});

describe('the fake checks server tool blocks as the API does', () => {
  const use = { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: { query: 'q' } };
  const result = { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [] };
  it('accepts a call and its result in one turn, or across a paused turn', () => {
    validateConversation([
      { role: 'user', content: 'q' },
      { role: 'assistant', content: [use, result] },
    ]);
    validateConversation([
      { role: 'user', content: 'q' },
      { role: 'assistant', content: [use] },
      { role: 'assistant', content: [result] },
    ]);
  });
  it('refuses a result without its call, and server blocks in user turns', () => {
    assert.throws(
      () =>
        validateConversation([
          { role: 'user', content: 'q' },
          { role: 'assistant', content: [result] },
        ]),
      /no corresponding `server_tool_use`/,
    );
    assert.throws(() => validateConversation([{ role: 'user', content: [use] }]), /only appear in assistant/);
  });
});
