/**
 * MCP servers as tools (spec §6.2): a real MCP server (the MCP SDK's `McpServer` over Streamable HTTP, in its own
 * process: test/fixtures/mcp-server.ts) serves tools to sessions through the service's pooled MCP client and the
 * Anthropic SDK's `mcpTools()`; the fake Messages API plays the model.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startMcpServer, type TestMcpServer } from '../helpers/mcp-server.js';
import { text, toolCall, toolCalls, toolUse } from '../fake/script.js';
import { validateConversation } from '../fake/server.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import type { FakeRequest } from '../../src/offline/wire.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { leaseOwnerPid, redisClient } from '../durability/chaos-lib.js';
import type { Redis } from 'ioredis';

/** Polls until `fn` gives a truthy value (conditions, never sleeps that hope). */
async function until<T>(fn: () => Promise<T> | T, what: string, timeoutMs = 30_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function events(api: Api, id: string): Promise<Array<{ type: string; data: any }>> {
  const r = await api.get(`/v1/sessions/${id}/events?limit=1000`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data;
}

const mcpServers = (url: string, volatileUrl: string) =>
  JSON.stringify({
    main: { url, headers: { authorization: 'Bearer ${MCP_TEST_TOKEN}' } },
    private: { url, headers: { authorization: 'Bearer ${MCP_TEST_TOKEN}' }, tenants: ['a'] },
    // Killed and started again by the tests below.
    volatile: { url: volatileUrl },
  });

describe('MCP servers as tools', { timeout: 240_000 }, () => {
  let h: Harness;
  let mcp: TestMcpServer;
  let volatile: TestMcpServer;
  let api: Api;
  let apiB: Api;

  before(async () => {
    [mcp, volatile] = await Promise.all([startMcpServer({ token: 'mcp-secret-token' }), startMcpServer()]);
    h = await startHarness({
      env: {
        API_KEYS: 'a:key-a,b:key-b',
        MCP_SERVERS: mcpServers(mcp.url, volatile.url),
        MCP_TEST_TOKEN: 'mcp-secret-token',
        // Far above what any call here takes: a call cut short must not be waiting for this.
        MCP_CALL_TIMEOUT_MS: '120000',
        TEST_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'silent',
      },
    });
    api = h.api;
    apiB = h.api.as('key-b');
  });
  after(async () => {
    await h?.close();
    await mcp?.kill();
    await volatile?.kill();
  });
  beforeEach(() => h.fake.reset());

  it('GET /v1/tools lists each server tool and MCP tool with its server and annotations, per tenant', async () => {
    const a = await api.get('/v1/tools');
    assert.equal(a.status, 200, JSON.stringify(a.body));
    const echo = a.body.data.filter((t: any) => t.name === 'echo');
    assert.deepEqual(
      echo.map((t: any) => t.mcp_server),
      ['main', 'private', 'volatile'],
    );
    assert.equal(echo[0].source, 'mcp');
    assert.equal(echo[0].idempotent, true, 'readOnlyHint makes it safe to run again');
    assert.deepEqual(echo[0].annotations, { readOnlyHint: true });
    assert.equal(echo[0].input_schema.type, 'object');
    const slowWrite = a.body.data.find((t: any) => t.name === 'slow_write');
    assert.equal(slowWrite.idempotent, false);
    assert.ok(a.body.data.some((t: any) => t.name === 'get_weather' && t.source === 'server'));
    assert.deepEqual(
      a.body.mcp_servers.map((s: any) => [s.name, s.reachable]),
      [
        ['main', true],
        ['private', true],
        ['volatile', true],
      ],
    );
    const b = await apiB.get('/v1/tools');
    assert.deepEqual(
      b.body.mcp_servers.map((s: any) => s.name),
      ['main', 'volatile'],
      'tenant b is not listed for "private"',
    );
    assert.ok(b.body.data.every((t: any) => t.mcp_server !== 'private'));
  });

  it('runs a sequential and a parallel call; MCP content (text, image, resource) reaches the model as blocks', async () => {
    h.fake.enqueue(
      toolCall('echo', { text: 'one' }, { id: 'toolu_seq' }),
      toolCalls([
        toolUse('echo', { text: 'two' }, 'toolu_p1'),
        toolUse('add_numbers', { a: 2, b: 40 }, 'toolu_p2'),
        toolUse('picture', {}, 'toolu_p3'),
        toolUse('get_weather', { location: 'Paris' }, 'toolu_p4'),
      ]),
      text('All done.'),
    );
    const created = await api.post('/v1/sessions', {
      input: 'Use the tools',
      tools: [{ mcp_server: 'main' }, 'get_weather'],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const done = await api.waitStatus(id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.equal(done.iteration, 3);

    const sent = h.fake.requests[0]!.body;
    const names = (sent.tools as any[]).map((t) => t.name);
    for (const n of ['echo', 'add_numbers', 'slow_write', 'slow_read', 'broken', 'picture', 'get_weather'])
      assert.ok(names.includes(n), `${n} offered to the model: ${names.join(',')}`);
    const echoDef = (sent.tools as any[]).find((t) => t.name === 'echo');
    assert.equal(echoDef.description, 'Echo a text back.');
    assert.equal(echoDef.input_schema.properties.text.type, 'string');

    const first = h.fake.requests[1]!.messages.at(-1) as any;
    assert.deepEqual(first.content, [
      { type: 'tool_result', tool_use_id: 'toolu_seq', content: [{ type: 'text', text: 'echo: one' }] },
    ]);
    const second = h.fake.requests[2]!.messages.at(-1) as any;
    const byId = new Map<string, any>(second.content.map((b: any) => [b.tool_use_id, b]));
    assert.deepEqual(byId.get('toolu_p1').content, [{ type: 'text', text: 'echo: two' }]);
    assert.deepEqual(byId.get('toolu_p2').content, [{ type: 'text', text: '42' }]);
    const picture = byId.get('toolu_p3').content;
    assert.deepEqual(picture[0], { type: 'text', text: 'here it is' });
    assert.equal(picture[1].type, 'image');
    assert.equal(picture[1].source.media_type, 'image/png');
    assert.equal(picture[2].type, 'document', 'an embedded text resource becomes a document block');
    assert.equal(picture[2].source.data, 'a note');
    assert.match(JSON.stringify(byId.get('toolu_p4').content), /Simulated weather in Paris/);
    const history = (await api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.doesNotThrow(() => validateConversation(history, true));

    const ev = await events(api, id);
    const started = ev.filter((e) => e.type === 'tool.started').map((e) => e.data.tool_use_id);
    const completed = ev.filter((e) => e.type === 'tool.completed');
    assert.deepEqual(started.sort(), ['toolu_p1', 'toolu_p2', 'toolu_p3', 'toolu_p4', 'toolu_seq']);
    const seq = completed.find((e) => e.data.tool_use_id === 'toolu_seq')!;
    assert.equal(seq.data.name, 'echo');
    assert.equal(seq.data.is_error, false);
    assert.equal(typeof seq.data.duration_ms, 'number');
    const calls = await mcp.calls();
    assert.equal(calls['echo:one']?.finished, 1);
    assert.equal(calls['echo:two']?.finished, 1);
  });

  it('a tool answering isError gives the model an is_error result, and the session goes on', async () => {
    h.fake.enqueue(toolCall('broken', {}, { id: 'toolu_broken' }), text('It failed, sorry.'));
    const created = await api.post('/v1/sessions', {
      input: 'Break it',
      tools: [{ mcp_server: 'main', allowed_tools: ['broken', 'echo'] }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const names = (h.fake.requests[0]!.body.tools as any[]).map((t) => t.name).sort();
    assert.deepEqual(names, ['broken', 'echo'], 'allowed_tools picks the tools offered');
    const result = (h.fake.requests[1]!.messages.at(-1) as any).content[0];
    assert.deepEqual(result, {
      type: 'tool_result',
      tool_use_id: 'toolu_broken',
      content: [{ type: 'text', text: 'the widget is broken' }],
      is_error: true,
    });
    const completed = (await events(api, created.body.id)).find((e) => e.type === 'tool.completed')!;
    assert.equal(completed.data.is_error, true);
  });

  it('refuses at create: a server the tenant may not use, an unknown tool, a name clash, a server given twice', async () => {
    const b = await apiB.post('/v1/sessions', { input: 'x', tools: [{ mcp_server: 'private' }] });
    assert.equal(b.status, 400, JSON.stringify(b.body));
    assert.equal(b.body.error.code, 'unknown_tool');
    const none = await api.post('/v1/sessions', { input: 'x', tools: [{ mcp_server: 'nope' }] });
    assert.equal(none.status, 400);
    assert.equal(none.body.error.code, 'unknown_tool');
    assert.deepEqual(b.body.error.message.replace('private', 'nope'), none.body.error.message);
    const unknownTool = await api.post('/v1/sessions', {
      input: 'x',
      tools: [{ mcp_server: 'main', allowed_tools: ['echo', 'missing'] }],
    });
    assert.equal(unknownTool.status, 400);
    assert.equal(unknownTool.body.error.code, 'unknown_tool');
    assert.match(unknownTool.body.error.message, /missing/);
    const clash = await api.post('/v1/sessions', {
      input: 'x',
      tools: [{ mcp_server: 'main' }, { name: 'echo', input_schema: { type: 'object' } }],
    });
    assert.equal(clash.status, 400, JSON.stringify(clash.body));
    assert.equal(clash.body.error.code, 'tool_name_conflict');
    assert.match(clash.body.error.message, /"echo"/);
    const twoServers = await api.post('/v1/sessions', {
      input: 'x',
      tools: [{ mcp_server: 'main' }, { mcp_server: 'private' }],
    });
    assert.equal(twoServers.status, 400);
    assert.equal(twoServers.body.error.code, 'tool_name_conflict', 'both servers have echo');
    const narrowed = await api.post('/v1/sessions', {
      input: 'x',
      start: false,
      tools: [
        { mcp_server: 'main', allowed_tools: ['echo'] },
        { mcp_server: 'private', allowed_tools: ['add_numbers'] },
      ],
    });
    assert.equal(narrowed.status, 201, 'allowed_tools removes the clash');
    const twice = await api.post('/v1/sessions', {
      input: 'x',
      tools: [{ mcp_server: 'main' }, { mcp_server: 'main', allowed_tools: ['echo'] }],
    });
    assert.equal(twice.status, 400);
    assert.equal(twice.body.error.code, 'duplicate_tool');
    const bad = await api.post('/v1/sessions', { input: 'x', tools: [{ mcp_server: 'main', extra: 1 }] });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.code, 'invalid_request');
  });
  it('an approval with an edited input runs the edited call, and the model sees the call that ran', async () => {
    h.fake.enqueue(toolCall('echo', { text: 'original' }, { id: 'toolu_appr' }), text('Approved and done.'));
    const created = await api.post('/v1/sessions', {
      input: 'Echo something',
      tools: [{ mcp_server: 'main', allowed_tools: ['echo'] }],
      approval: ['echo'],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const waiting = await api.waitStatus(id, ['requires_action', 'idle', 'failed'], 30_000);
    assert.equal(waiting.required_action?.type, 'approve_tool_calls', JSON.stringify(waiting));
    const decided = await api.post(`/v1/sessions/${id}/tool-calls/toolu_appr`, {
      decision: 'approve',
      input: { text: 'edited' },
    });
    assert.equal(decided.status, 202, JSON.stringify(decided.body));
    const done = await api.waitStatus(id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const sent = h.fake.requests[1]!.messages as any[];
    assert.deepEqual(sent[1].content[0].input, { text: 'edited' }, 'the history holds the edited call');
    assert.deepEqual(sent[2].content[0].content, [{ type: 'text', text: 'echo: edited' }]);
    const calls = await mcp.calls();
    assert.equal(calls['echo:edited']?.finished, 1);
    assert.equal(calls['echo:original'], undefined, 'the original input never ran');
  });

  it('a result under review is replaced before the model sees it', async () => {
    h.fake.enqueue(toolCall('echo', { text: 'to review' }, { id: 'toolu_rev' }), text('Reviewed.'));
    const created = await api.post('/v1/sessions', {
      input: 'Echo for review',
      tools: [{ mcp_server: 'main' }],
      review_tool_results: ['echo'],
    });
    const id = created.body.id;
    const waiting = await api.waitStatus(id, ['requires_action', 'idle', 'failed'], 30_000);
    assert.equal(waiting.required_action?.type, 'review_tool_results', JSON.stringify(waiting));
    assert.deepEqual(waiting.required_action.tool_results, [
      { tool_use_id: 'toolu_rev', content: [{ type: 'text', text: 'echo: to review' }], is_error: false },
    ]);
    const put = await api.req('PUT', `/v1/sessions/${id}/tool-results/toolu_rev`, {
      content: 'checked by a human',
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const cont = await api.post(`/v1/sessions/${id}/continue`);
    assert.equal(cont.status, 202, JSON.stringify(cont.body));
    const done = await api.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const result = (h.fake.requests[1]!.messages.at(-1) as any).content[0];
    assert.deepEqual(result, {
      type: 'tool_result',
      tool_use_id: 'toolu_rev',
      content: 'checked by a human',
    });
  });

  it('a server killed mid-call gives an is_error result at once; down, calls fail; restarted, the next session reconnects', async () => {
    h.fake.enqueue(
      toolCall('slow_write', { ms: 60_000, label: 'killed' }, { id: 'toolu_killed' }),
      text('Went on without it.'),
    );
    const created = await api.post('/v1/sessions', {
      input: 'Write slowly',
      tools: [{ mcp_server: 'volatile' }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    await until(
      async () => (await volatile.calls())['slow_write:killed']?.started === 1,
      'the call to start',
    );
    await volatile.kill();
    // Far below MCP_CALL_TIMEOUT_MS (120 s): the cut stream failed the call, no timeout did.
    const done = await api.waitStatus(id, ['idle', 'failed', 'requires_action'], 60_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const result = (h.fake.requests[1]!.messages.at(-1) as any).content[0];
    assert.equal(result.tool_use_id, 'toolu_killed');
    assert.equal(result.is_error, true);
    assert.match(JSON.stringify(result.content), /MCP server/);
    const completed = (await events(api, id)).find((e) => e.type === 'tool.completed')!;
    assert.equal(completed.data.is_error, true);

    // Down: the tools are still offered (the last list), and a call gets an is_error result.
    h.fake.reset();
    h.fake.enqueue(toolCall('echo', { text: 'nobody' }, { id: 'toolu_down' }), text('Noted.'));
    const down = await api.post('/v1/sessions', { input: 'Echo', tools: [{ mcp_server: 'volatile' }] });
    const downDone = await api.waitStatus(down.body.id, ['idle', 'failed', 'requires_action'], 60_000);
    assert.equal(downDone.status, 'idle', JSON.stringify(downDone));
    const downResult = (h.fake.requests[1]!.messages.at(-1) as any).content[0];
    assert.equal(downResult.is_error, true);
    assert.match(JSON.stringify(downResult.content), /unreachable/);

    // Restarted on the same port: it knows nothing of the old MCP session; the next session connects anew.
    volatile = await startMcpServer({ port: volatile.port });
    h.fake.reset();
    h.fake.enqueue(toolCall('echo', { text: 'back' }, { id: 'toolu_back' }), text('It is back.'));
    const again = await api.post('/v1/sessions', {
      input: 'Echo again',
      tools: [{ mcp_server: 'volatile' }],
    });
    const againDone = await api.waitStatus(again.body.id, ['idle', 'failed', 'requires_action'], 60_000);
    assert.equal(againDone.status, 'idle', JSON.stringify(againDone));
    const backResult = (h.fake.requests[1]!.messages.at(-1) as any).content[0];
    assert.deepEqual(backResult, {
      type: 'tool_result',
      tool_use_id: 'toolu_back',
      content: [{ type: 'text', text: 'echo: back' }],
    });
    assert.equal((await volatile.calls())['echo:back']?.finished, 1, 'the restarted server ran it');
  });

  it('a cancel while an MCP call runs answers it "cancelled", not as a timeout (the server may have finished it)', async () => {
    h.fake.enqueue(toolCall('slow_write', { ms: 3000, label: 'cancelled' }, { id: 'toolu_cx' }));
    const created = await api.post('/v1/sessions', {
      input: 'Write slowly',
      tools: [{ mcp_server: 'main' }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    await until(async () => (await mcp.calls())['slow_write:cancelled']?.started === 1, 'the call to start');
    const cancel = await api.post(`/v1/sessions/${id}/cancel`);
    assert.equal(cancel.status, 200, JSON.stringify(cancel.body));
    const done = await api.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(done.stop_reason, 'cancelled', JSON.stringify(done));
    const history = (await api.get(`/v1/sessions/${id}/messages`)).body.data as any[];
    const result = history.at(-1).content.find((b: any) => b.tool_use_id === 'toolu_cx');
    assert.equal(result.is_error, true);
    assert.equal(JSON.stringify(result.content).includes('did not answer'), false, JSON.stringify(result));
    assert.match(JSON.stringify(result.content), /cancelled before this tool call completed/);
  });

  it('an interrupt while an MCP call runs stops it, and the model is told so, not that it timed out', async () => {
    h.fake.enqueue(
      toolCall('slow_write', { ms: 3000, label: 'interrupted' }, { id: 'toolu_ix' }),
      text('Stopped it, and heard you.'),
    );
    const created = await api.post('/v1/sessions', {
      input: 'Write slowly',
      tools: [{ mcp_server: 'main' }],
    });
    const id = created.body.id;
    await until(
      async () => (await mcp.calls())['slow_write:interrupted']?.started === 1,
      'the call to start',
    );
    const m = await api.post(`/v1/sessions/${id}/messages`, { text: 'Also this.', interrupt: true });
    assert.equal(m.status, 202, JSON.stringify(m.body));
    const done = await api.waitStatus(id, ['idle', 'failed'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const turn = h.fake.requests.at(-1)!.messages.at(-1)!.content as any[];
    assert.equal(turn[0].tool_use_id, 'toolu_ix');
    assert.equal(turn[0].is_error, true);
    assert.equal(JSON.stringify(turn[0].content).includes('did not answer'), false, JSON.stringify(turn[0]));
    assert.match(JSON.stringify(turn[0].content), /interrupted before its result came/);
    assert.equal(turn.at(-1).text, 'Also this.');
  });

  it('the offline model calls an MCP tool the text asks for (name and description match) and reports its result', async () => {
    // No script queued: the fake answers with the offline model, as a service without ANTHROPIC_API_KEY does.
    const created = await api.post('/v1/sessions', {
      input: 'Please add numbers 19 and 23 for me',
      tools: [{ mcp_server: 'main', allowed_tools: ['echo', 'add_numbers', 'broken'] }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const history = (await api.get(`/v1/sessions/${created.body.id}/messages`)).body.data;
    const use = history[1].content.find((b: any) => b.type === 'tool_use');
    assert.equal(use.name, 'add_numbers', JSON.stringify(history[1]));
    assert.deepEqual(use.input, { a: 19, b: 23 });
    assert.deepEqual(history[2].content[0].content, [{ type: 'text', text: '42' }]);
    assert.match(JSON.stringify(history.at(-1).content), /42/, 'the final reply reports the result');
  });

  it('a tool added on the server (notifications/tools/list_changed) is listed and offered to the next session', async () => {
    const before = await api.get('/v1/tools');
    assert.ok(!before.body.data.some((t: any) => t.name === 'fresh_tool'));
    await mcp.addTool('fresh_tool');
    // MCP_TOOLS_TTL_MS is 5 minutes: only the server's notice makes the list change within this test.
    await until(
      async () =>
        (await api.get('/v1/tools')).body.data.some(
          (t: any) => t.name === 'fresh_tool' && t.mcp_server === 'main',
        ),
      'the new tool listed',
    );
    h.fake.enqueue(toolCall('fresh_tool', {}, { id: 'toolu_fresh' }), text('Used the new tool.'));
    const created = await api.post('/v1/sessions', {
      input: 'Try the new tool',
      tools: [{ mcp_server: 'main', allowed_tools: ['fresh_tool'] }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.deepEqual(
      (h.fake.requests[0]!.body.tools as any[]).map((t) => t.name),
      ['fresh_tool'],
    );
    const result = (h.fake.requests[1]!.messages.at(-1) as any).content[0];
    assert.deepEqual(result.content, [{ type: 'text', text: 'new tool fresh_tool' }]);
  });
});

/** The first user turn's text of a request. */
function firstText(req: FakeRequest): string {
  const c = req.messages[0]?.content;
  if (typeof c === 'string') return c;
  const b = c?.[0];
  return b?.type === 'text' ? b.text : '';
}

describe('MCP sessions and a shutdown', { timeout: 120_000 }, () => {
  it('a service that stops ends its MCP session on the server (DELETE), and only then', async () => {
    const server = await startMcpServer();
    let h: Harness | undefined;
    try {
      h = await startHarness({
        env: { MCP_SERVERS: JSON.stringify({ tools: { url: server.url } }), TEST_LOG_LEVEL: 'silent' },
      });
      assert.equal(await server.openSessions(), 0);
      const listed = await h.api.get('/v1/tools');
      assert.equal(listed.status, 200, JSON.stringify(listed.body));
      assert.ok(
        listed.body.data.some((t: any) => t.mcp_server === 'tools'),
        'the MCP tools are listed',
      );
      assert.equal(await server.openSessions(), 1, 'one pooled MCP session while the service runs');
      await h.close();
      h = undefined;
      assert.equal(await server.openSessions(), 0, 'the shutdown ended it');
    } finally {
      await h?.close();
      await server.kill();
    }
  });
});

describe('MCP calls and a crash of the service (SIGKILL)', { timeout: 240_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let mcp: TestMcpServer;
  let r: Redis;
  const procs: ServiceProcess[] = [];
  let env: Record<string, string>;
  /** Two live service processes. */
  const ensureTwo = async () => {
    for (let i = procs.length - 1; i >= 0; i--) if (!procs[i]!.running()) procs.splice(i, 1);
    while (procs.length < 2) procs.push(await spawnService(env, { name: `svc${procs.length}` }));
  };

  before(async () => {
    [redis, fake, mcp] = await Promise.all([
      startTestRedis(),
      startFakeAnthropic({ strictAlternation: true }),
      startMcpServer(),
    ]);
    r = redisClient(redis.url);
    // "<tool>:<label>" in the first user turn: call that tool with an 8 s wait (a kill lands while it runs, even on a
    // loaded machine); after its result, end the turn.
    fake.setHandler((req) => {
      const last = req.messages.at(-1);
      if (Array.isArray(last?.content) && last.content.some((b) => b.type === 'tool_result'))
        return text('Done.');
      const [tool, label] = firstText(req).split(':');
      return toolCall(tool!, { ms: 8000, label });
    });
    env = serviceEnv(redis.url, fake.url, {
      LEASE_TTL_MS: '2000',
      MCP_SERVERS: JSON.stringify({ tools: { url: mcp.url } }),
    });
    await ensureTwo();
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.kill()));
    r?.disconnect();
    await fake?.close();
    await mcp?.kill();
    await redis?.stop();
  });

  /** Starts a session calling `tool`, kills the process running the call, and waits for the survivor to finish it. */
  async function crashDuring(tool: string, label: string) {
    await ensureTwo();
    const live = [...procs];
    const created = await live[0]!.api.post('/v1/sessions', {
      input: `${tool}:${label}`,
      tools: [{ mcp_server: 'tools', allowed_tools: [tool] }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id as string;
    await until(async () => (await mcp.calls())[`${tool}:${label}`]?.started === 1, 'the call to start');
    const pid = await until(() => leaseOwnerPid(r, id), 'the lease holder');
    const owner = live.find((p) => p.pid === pid)!;
    assert.ok(owner, 'the lease holder is one of ours');
    await owner.kill();
    const survivor = live.find((p) => p !== owner)!;
    const done = await survivor.api.waitStatus(id, ['idle', 'failed', 'requires_action'], 60_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const history = (await survivor.api.get(`/v1/sessions/${id}/messages`)).body.data;
    assert.doesNotThrow(() => validateConversation(history, true));
    return { history, calls: (await mcp.calls())[`${tool}:${label}`]! };
  }

  it('a non-idempotent MCP call running when its process died is answered "interrupted", never run again', async () => {
    const { history, calls } = await crashDuring('slow_write', 'crash-write');
    const result = history[2].content[0];
    assert.equal(result.type, 'tool_result');
    assert.equal(result.is_error, true);
    assert.match(JSON.stringify(result.content), /interrupted/);
    assert.equal(calls.started, 1, 'it ran once, on the killed process');
  });

  it('an idempotent MCP call (idempotentHint) running when its process died runs again', async () => {
    const { history, calls } = await crashDuring('slow_read', 'crash-read');
    const result = history[2].content[0];
    assert.equal(result.is_error, undefined, JSON.stringify(result));
    assert.deepEqual(result.content, [{ type: 'text', text: 'read crash-read' }]);
    assert.equal(calls.started, 2, 'it ran again on the survivor');
  });
});

describe('MCP_SERVERS at boot', () => {
  it('a bad value stops the boot with a message naming it, never printing a header value', () => {
    const bad = [
      'not json',
      JSON.stringify({ main: { url: 'ftp://x/mcp' } }),
      JSON.stringify({ main: { url: 'http://127.0.0.1:1/mcp', extra: true } }),
      JSON.stringify({ 'bad name!': { url: 'http://127.0.0.1:1/mcp' } }),
      JSON.stringify({
        main: { url: 'http://127.0.0.1:1/mcp', headers: { authorization: 'Bearer ${UNSET_VAR}' } },
      }),
    ];
    for (const value of bad) {
      assert.throws(
        () => loadConfig({ MCP_SERVERS: value }),
        (e: Error) => e instanceof ConfigError && /MCP_SERVERS/.test(e.message),
        value,
      );
    }
    const secret = 'Bearer do-not-print-me';
    const out = spawnSync(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
      env: {
        PATH: process.env['PATH'],
        PORT: '0',
        MCP_SERVERS: JSON.stringify({ main: { url: 'nope', headers: { authorization: secret } } }),
      },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(out.status, 78, out.stderr);
    assert.match(out.stderr, /MCP_SERVERS\.main\.url/);
    assert.ok(!out.stderr.includes('do-not-print-me') && !out.stdout.includes('do-not-print-me'));
    // `${ENV}` names a variable: substituted at boot.
    const ok = loadConfig({
      MCP_SERVERS: JSON.stringify({
        m: { url: 'http://h/mcp', headers: { authorization: 'Bearer ${TOK}' } },
      }),
      TOK: 'abc',
    });
    assert.equal(ok.MCP_SERVERS?.get('m')?.headers['authorization'], 'Bearer abc');
  });
});
