/**
 * What the Messages API would refuse never enters a session: empty text blocks (messages, tool results, `system`),
 * images and PDFs with malformed base64 or a URL that is not https (an image media type the API does not take), and
 * a `tool_choice` that does not fit the session's tools, at create, on a follow-up (REST, WebSocket frame, chat), at
 * PATCH (the params and tools after the change, together) and at retry. Each is a 400 `invalid_request` that leaves
 * Redis unchanged; what the API takes runs against the fake, which refuses the same things.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Harness } from '../helpers/service.js';
import { snapshotDiff, snapshotRedis } from '../helpers/redis-snapshot.js';
import { connectWs } from '../fixtures/event-clients.js';
import { startMcpServer } from '../helpers/mcp-server.js';
import { text, toolCall } from '../fake/script.js';

interface Case {
  name: string;
  method: string;
  path: string;
  body: unknown;
}

const u = (content: unknown) => ({ role: 'user', content });
const a = (content: unknown) => ({ role: 'assistant', content });
const image = (source: unknown) => ({ type: 'image', source });
const pdf = (source: unknown) => ({ type: 'document', source });
const png = (data: string) => image({ type: 'base64', media_type: 'image/png', data });
const PNG = 'iVBORw0KGgo=';

describe('requests the Messages API would refuse are 400 invalid_request and change nothing', () => {
  let h: Harness;
  /** idle after one run, tools: calculate_sum */
  let IDLE: string;
  /** idle, never run, tools: calculate_sum, tool_choice names calculate_sum */
  let FORCED: string;
  /** idle, never run, no tools */
  let BARE: string;

  before(async () => {
    h = await startHarness();
    h.fake.enqueue(text('Idle now.'));
    const idle = await h.api.post('/v1/sessions', { input: 'idle one', tools: ['calculate_sum'] });
    assert.equal(idle.status, 201, JSON.stringify(idle.body));
    IDLE = idle.body.id;
    assert.equal((await h.api.waitStatus(IDLE, ['idle', 'failed'])).status, 'idle');
    const forced = await h.api.post('/v1/sessions', {
      start: false,
      tools: ['calculate_sum'],
      params: { tool_choice: { type: 'tool', name: 'calculate_sum', disable_parallel_tool_use: true } },
    });
    assert.equal(forced.status, 201, JSON.stringify(forced.body));
    FORCED = forced.body.id;
    const bare = await h.api.post('/v1/sessions', { start: false });
    assert.equal(bare.status, 201, JSON.stringify(bare.body));
    BARE = bare.body.id;
  });
  after(async () => h?.close());

  /** Every case must answer 400 invalid_request with a message, and leave Redis as it was; problems are collected. */
  async function check(cases: Case[]): Promise<void> {
    const baseline = await snapshotRedis(h.redis.url, h.service.app.engine);
    const problems: string[] = [];
    for (const c of cases) {
      const r = await h.api.req(c.method, c.path, c.body);
      if (r.status !== 400 || r.body?.error?.code !== 'invalid_request')
        problems.push(`${c.name}: got ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
      else if (typeof r.body.error.message !== 'string') problems.push(`${c.name}: no error.message`);
      const diff = snapshotDiff(baseline, await snapshotRedis(h.redis.url, h.service.app.engine));
      if (diff.length) {
        problems.push(`${c.name}: Redis changed: ${diff.join(', ')}`);
        break;
      }
    }
    assert.deepEqual(problems, [], `\n${problems.join('\n')}`);
  }

  const create = (name: string, body: unknown): Case => ({
    name,
    method: 'POST',
    path: '/v1/sessions',
    body,
  });

  it("a user turn's text of whitespace only: in input, history, and posted messages", async () => {
    const made = await h.api.post('/v1/sessions', { start: false });
    assert.equal(made.status, 201);
    const P = `/v1/sessions/${made.body.id}/messages`;
    await check([
      create('a blank input', { input: ' \n ' }),
      create('a blank user string in the history', { messages: [u('\t')] }),
      create('a blank user text block in the history', {
        messages: [
          u([
            { type: 'text', text: 'hi' },
            { type: 'text', text: '  ' },
          ]),
        ],
      }),
      { name: 'a blank posted text', method: 'POST', path: P, body: { text: '   ' } },
      { name: 'a blank posted string', method: 'POST', path: P, body: { content: '\n\n' } },
      {
        name: 'a blank posted block',
        method: 'POST',
        path: P,
        body: { content: [{ type: 'text', text: ' ' }] },
      },
    ]);
  });

  it('POST /v1/sessions: empty text blocks, in messages, tool results and system', async () => {
    await check([
      create('an empty text block', { messages: [u([{ type: 'text', text: '' }])] }),
      create('an empty text block after a good one', {
        messages: [
          u([
            { type: 'text', text: 'hi' },
            { type: 'text', text: '' },
          ]),
        ],
      }),
      create('an empty text block in an assistant turn', {
        messages: [u('hi'), a([{ type: 'text', text: '' }]), u('again')],
      }),
      create('an empty text block in a tool result', {
        tools: ['calculate_sum'],
        messages: [
          u('hi'),
          a([{ type: 'tool_use', id: 'toolu_1', name: 'calculate_sum', input: { a: 1, b: 2 } }]),
          u([{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: '' }] }]),
        ],
      }),
      create('an empty text block in a search result', {
        messages: [
          u([
            {
              type: 'search_result',
              source: 'https://x.test',
              title: 't',
              content: [{ type: 'text', text: '' }],
            },
          ]),
        ],
      }),
      create('an empty system block', { input: 'hi', system: [{ type: 'text', text: '' }] }),
      create('an empty system block in params', {
        input: 'hi',
        params: { system: [{ type: 'text', text: '' }] },
      }),
      create('an empty user message', { messages: [u('')] }),
    ]);
  });

  it('POST /v1/sessions: images and PDFs the API would refuse', async () => {
    await check([
      create('image data outside the base64 alphabet', { messages: [u([png('!!!')])] }),
      create('image data of a bad length', { messages: [u([png('AAAAA')])] }),
      create('image data with misplaced padding', { messages: [u([png('AB=C')])] }),
      create('image data with a line break', { messages: [u([png('AAAA\nAAAA')])] }),
      create('image data empty', { messages: [u([png('')])] }),
      create('an image media type the API does not take', {
        messages: [u([image({ type: 'base64', media_type: 'image/svg+xml', data: 'AAAA' })])],
      }),
      create('an image URL over http', {
        messages: [u([image({ type: 'url', url: 'http://x.test/a.png' })])],
      }),
      create('an image file: URL', { messages: [u([image({ type: 'url', url: 'file:///etc/passwd' })])] }),
      create('an image javascript: URL', {
        messages: [u([image({ type: 'url', url: 'javascript:alert(1)' })])],
      }),
      create('an image ftp: URL', { messages: [u([image({ type: 'url', url: 'ftp://x.test/a.png' })])] }),
      create('an image data: URL as a url source', {
        messages: [u([image({ type: 'url', url: `data:image/png;base64,${PNG}` })])],
      }),
      create('a PDF whose data is not base64', {
        messages: [u([pdf({ type: 'base64', media_type: 'application/pdf', data: '%PDF-1.4' })])],
      }),
      create('a base64 document that is no PDF', {
        messages: [u([pdf({ type: 'base64', media_type: 'text/html', data: 'AAAA' })])],
      }),
      create('a PDF by an http URL', { messages: [u([pdf({ type: 'url', url: 'http://x.test/a.pdf' })])] }),
      create('a text document without its data', { messages: [u([pdf({ type: 'text' })])] }),
      create('a text document that is no plain text', {
        messages: [u([pdf({ type: 'text', media_type: 'text/html', data: '<p>' })])],
      }),
      create('a content document whose content is a number', {
        messages: [u([pdf({ type: 'content', content: 5 })])],
      }),
      create('a file document without file_id', { messages: [u([pdf({ type: 'file' })])] }),
      create('a citation of no known kind', {
        messages: [u('hi'), a([{ type: 'text', text: 'see', citations: [{ type: 'bogus' }] }]), u('ok')],
      }),
      create('a char_location citation without its indexes', {
        messages: [
          u('hi'),
          a([{ type: 'text', text: 'see', citations: [{ type: 'char_location', cited_text: 'x' }] }]),
          u('ok'),
        ],
      }),
      create('an image in a tool result with bad data', {
        tools: ['calculate_sum'],
        messages: [
          u('hi'),
          a([{ type: 'tool_use', id: 'toolu_1', name: 'calculate_sum', input: { a: 1, b: 2 } }]),
          u([{ type: 'tool_result', tool_use_id: 'toolu_1', content: [png('not base64')] }]),
        ],
      }),
    ]);
  });

  it('POST /v1/sessions: tool_choice that does not fit the tools', async () => {
    const choice = (name: string, tool_choice: unknown, tools: unknown[] = ['calculate_sum']) =>
      create(name, { input: 'hi', tools, params: { tool_choice } });
    await check([
      choice('tool without a name', { type: 'tool' }),
      choice('tool naming no tool of the session', { type: 'tool', name: 'nope' }),
      choice('tool naming a server tool the session does not have', { type: 'tool', name: 'get_weather' }),
      choice('any without tools', { type: 'any' }, []),
      choice('tool without tools', { type: 'tool', name: 'calculate_sum' }, []),
      choice('an unknown type', { type: 'required' }),
      choice('an unknown field', { type: 'auto', parallel: false }),
      choice('disable_parallel_tool_use on none', { type: 'none', disable_parallel_tool_use: true }),
      choice('disable_parallel_tool_use not a boolean', { type: 'any', disable_parallel_tool_use: 'yes' }),
      create('any without tools, not started', { start: false, params: { tool_choice: { type: 'any' } } }),
    ]);
  });

  it('POST /v1/sessions/:id/messages: empty text blocks and bad images', async () => {
    const P = `/v1/sessions/${IDLE}/messages`;
    const post = (name: string, content: unknown): Case => ({
      name,
      method: 'POST',
      path: P,
      body: { content },
    });
    await check([
      post('an empty text block', [{ type: 'text', text: '' }]),
      post('an empty text block among others', [
        { type: 'text', text: 'hi' },
        { type: 'text', text: '' },
      ]),
      post('image data that is not base64', [png('xx!x')]),
      post('an image by a file: URL', [image({ type: 'url', url: 'file:///etc/passwd' })]),
      post('a PDF by an http URL', [pdf({ type: 'url', url: 'http://x.test/a.pdf' })]),
    ]);
  });

  it('PATCH /v1/sessions/:id: the tools and tool_choice after the change, together; retry with params', async () => {
    const patch = (name: string, id: string, body: unknown): Case => ({
      name,
      method: 'PATCH',
      path: `/v1/sessions/${id}`,
      body,
    });
    await check([
      patch('every tool removed while tool_choice names one', FORCED, { tools: [] }),
      patch('the named tool replaced by another', FORCED, { tools: ['get_weather'] }),
      patch('tool_choice renamed to no tool', FORCED, {
        params: { tool_choice: { type: 'tool', name: 'nope' } },
      }),
      patch('tool_choice any on a session without tools', BARE, { params: { tool_choice: { type: 'any' } } }),
      patch('tool_choice and tools changed together, not matching', BARE, {
        tools: ['calculate_sum'],
        params: { tool_choice: { type: 'tool', name: 'get_weather' } },
      }),
      patch('tool_choice without a name', IDLE, { params: { tool_choice: { type: 'tool' } } }),
      patch('an empty system block', IDLE, { params: { system: [{ type: 'text', text: '' }] } }),
      {
        name: 'retry with a tool_choice naming no tool',
        method: 'POST',
        path: `/v1/sessions/${IDLE}/retry`,
        body: { params: { tool_choice: { type: 'tool', name: 'nope' } } },
      },
    ]);
  });

  it('a WebSocket message frame with an empty text block or a bad image is an error frame', async () => {
    const baseline = await snapshotRedis(h.redis.url, h.service.app.engine);
    const c = await connectWs(h.service.url, IDLE);
    try {
      const empty = await c.request({ type: 'message', ref: 'e1', content: [{ type: 'text', text: '' }] });
      assert.equal(empty.type, 'error');
      assert.equal(empty.error.code, 'invalid_request');
      const url = await c.request({
        type: 'message',
        ref: 'e2',
        content: [image({ type: 'url', url: 'javascript:alert(1)' })],
      });
      assert.equal(url.error.code, 'invalid_request');
      const data = await c.request({ type: 'message', ref: 'e3', content: [png('@@@@')] });
      assert.equal(data.error.code, 'invalid_request');
    } finally {
      c.close();
    }
    assert.deepEqual(snapshotDiff(baseline, await snapshotRedis(h.redis.url, h.service.app.engine)), []);
  });

  it('POST /v1/chat: file parts the API would refuse are 400 invalid_request', async () => {
    const chat = (name: string, part: unknown): Case => ({
      name,
      method: 'POST',
      path: '/v1/chat',
      body: {
        id: IDLE,
        messages: [{ id: `m-${name}`, role: 'user', parts: [{ type: 'text', text: 'see' }, part] }],
      },
    });
    const file = (url: string, mediaType = 'image/png') => ({ type: 'file', mediaType, url });
    await check([
      chat('a file: URL', file('file:///etc/passwd')),
      chat('an http URL', file('http://x.test/a.png')),
      chat('a javascript: URL', file('javascript:alert(1)')),
      chat('a data: URL with bad base64', file('data:image/png;base64,!!!!')),
      chat('a data: URL of a media type the API does not take', file('data:image/bmp;base64,AAAA')),
      chat('a data: URL that is not base64', file('data:image/svg+xml,<svg/>', 'image/svg+xml')),
    ]);
  });

  it('what the API takes is accepted and runs against the fake: images, a PDF, a forced tool', async () => {
    h.fake.reset();
    h.fake.enqueue(toolCall('calculate_sum', { a: 1, b: 2 }), text('Three.'));
    const created = await h.api.post('/v1/sessions', {
      tools: ['calculate_sum'],
      system: [{ type: 'text', text: 'Be brief.' }],
      params: { tool_choice: { type: 'tool', name: 'calculate_sum', disable_parallel_tool_use: true } },
      messages: [
        u([
          { type: 'text', text: 'Add 1 and 2; see the picture.' },
          png(PNG),
          image({ type: 'url', url: 'https://x.test/a.png' }),
          pdf({ type: 'base64', media_type: 'application/pdf', data: 'JVBERi0xLjQ=' }),
        ]),
      ],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const done = await h.api.waitStatus(created.body.id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.deepEqual(
      h.fake.requests.map((r) => r.status),
      [200, 200],
    );
    assert.deepEqual(h.fake.requests[0]!.body.tool_choice, {
      type: 'tool',
      name: 'calculate_sum',
      disable_parallel_tool_use: true,
    });
  });

  it('PATCH changing tools and tool_choice together is accepted, and the next run sends both', async () => {
    h.fake.reset();
    const created = await h.api.post('/v1/sessions', {
      start: false,
      tools: ['calculate_sum'],
      params: { tool_choice: { type: 'tool', name: 'calculate_sum' } },
    });
    const id = created.body.id;
    // Tools and tool_choice in one PATCH: the new tool_choice names a tool the same PATCH adds.
    const both = await h.api.req('PATCH', `/v1/sessions/${id}`, {
      tools: ['calculate_sum', 'get_weather'],
      params: { tool_choice: { type: 'tool', name: 'get_weather' } },
    });
    assert.equal(both.status, 200, JSON.stringify(both.body));
    // Every tool removed with tool_choice back to the API's default, in one PATCH; then a tool again.
    const none = await h.api.req('PATCH', `/v1/sessions/${id}`, { tools: [], params: { tool_choice: null } });
    assert.equal(none.status, 200, JSON.stringify(none.body));
    const auto = await h.api.req('PATCH', `/v1/sessions/${id}`, {
      params: { tool_choice: { type: 'auto' } },
    });
    assert.equal(auto.status, 200, JSON.stringify(auto.body));
    const back = await h.api.req('PATCH', `/v1/sessions/${id}`, {
      tools: ['get_weather'],
      params: { tool_choice: { type: 'any' } },
    });
    assert.equal(back.status, 200, JSON.stringify(back.body));
    h.fake.enqueue(text('Sunny.'));
    const sent = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Weather?' });
    assert.equal(sent.status, 202, JSON.stringify(sent.body));
    const done = await h.api.waitStatus(id, ['idle', 'failed']);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.equal(h.fake.requests.length, 1);
    assert.equal(h.fake.requests[0]!.status, 200);
    assert.deepEqual(h.fake.requests[0]!.body.tool_choice, { type: 'any' });
  });
});

describe(
  'tool_choice naming a tool of an MCP server given without allowed_tools',
  { timeout: 120_000 },
  () => {
    it('is accepted when the server lists the tool, refused when it does not', async () => {
      const server = await startMcpServer();
      let h: Harness | undefined;
      try {
        h = await startHarness({ env: { MCP_SERVERS: JSON.stringify({ tools: { url: server.url } }) } });
        const listed = await h.api.get('/v1/tools');
        const name = listed.body.data.find((t: any) => t.mcp_server === 'tools')?.name;
        assert.ok(name, JSON.stringify(listed.body));
        const body = (tool: string) => ({
          start: false,
          tools: [{ mcp_server: 'tools' }],
          params: { tool_choice: { type: 'tool', name: tool } },
        });
        const ok = await h.api.post('/v1/sessions', body(name));
        assert.equal(ok.status, 201, JSON.stringify(ok.body));
        const refused = await h.api.post('/v1/sessions', body('not_an_mcp_tool'));
        assert.equal(refused.status, 400, JSON.stringify(refused.body));
        assert.equal(refused.body.error.code, 'invalid_request');
        assert.match(refused.body.error.message, new RegExp(`its tools: .*${name}`));
      } finally {
        await h?.close();
        await server.kill();
      }
    });
  },
);
