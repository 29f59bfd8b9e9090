/**
 * Tenant MCP servers (spec §7.1, `/v1/mcp-servers`) and the bounds of MCP tool results (TOOL_RESULT_MAX_BYTES):
 * with the MCP SDK's own server (test/fixtures/mcp-server.ts) over real HTTP, the real SDK and the fake Messages API.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startMcpServer, type TestMcpServer } from '../helpers/mcp-server.js';
import { Redis } from 'ioredis';
import { text, toolCall } from '../fake/script.js';
import { parseExposition } from '../helpers/prometheus.js';

const TOKEN = 'tenant-mcp-token-0f3c';
const LIMIT = 100_000;

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

/** Every string of `v` (keys and values, at any depth) is well-formed Unicode: no lone surrogate. */
const wellFormed = (v: unknown): boolean =>
  typeof v === 'string'
    ? v.isWellFormed()
    : typeof v !== 'object' ||
      v === null ||
      Object.entries(v).every(([k, x]) => k.isWellFormed() && wellFormed(x));

/** The tool_result blocks of the last request the fake got. */
function lastResults(h: Harness): any[] {
  const m = h.fake.requests.at(-1)!.messages.at(-1) as any;
  return (m.content as any[]).filter((b) => b.type === 'tool_result');
}

describe('tenant MCP servers', { timeout: 240_000 }, () => {
  let h: Harness;
  let mcp: TestMcpServer;
  let api: Api;
  let apiB: Api;

  before(async () => {
    mcp = await startMcpServer({ token: TOKEN });
    h = await startHarness({
      env: {
        API_KEYS: 'a:key-a,b:key-b',
        WEBHOOK_ALLOW_PRIVATE: 'true',
        TOOL_RESULT_MAX_BYTES: String(LIMIT),
        WEBHOOK_SECRET_KEY: Buffer.alloc(32, 7).toString('base64'),
        // Far above what the server takes to build a 120 MB answer on a busy machine.
        MCP_CALL_TIMEOUT_MS: '60000',
        TEST_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'silent',
      },
    });
    api = h.api;
    apiB = h.api.as('key-b');
  });
  after(async () => {
    await h?.close();
    await mcp?.kill();
  });
  beforeEach(() => h.fake.reset());

  it('PUT creates (201) then replaces (200); headers are never returned; another tenant sees 404', async () => {
    const put = await api.req('PUT', '/v1/mcp-servers/mine', {
      url: mcp.url,
      headers: { authorization: 'Bearer nope' },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    assert.deepEqual(put.body.headers, { authorization: '[redacted]' });
    assert.equal(put.body.revision, 1);
    const again = await api.req('PUT', '/v1/mcp-servers/mine', {
      url: mcp.url,
      headers: { authorization: `Bearer ${TOKEN}`, 'x-extra': 'secret-extra' },
    });
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.equal(again.body.revision, 2);
    const got = await api.get('/v1/mcp-servers/mine');
    assert.equal(got.status, 200);
    assert.deepEqual(got.body.headers, { authorization: '[redacted]', 'x-extra': '[redacted]' });
    const list = await api.get('/v1/mcp-servers');
    assert.deepEqual(
      list.body.data.map((s: any) => s.name),
      ['mine'],
    );
    for (const body of [put.body, again.body, got.body, list.body]) {
      const json = JSON.stringify(body);
      assert.ok(!json.includes(TOKEN) && !json.includes('secret-extra'), json);
    }
    // Sealed at rest (WEBHOOK_SECRET_KEY is set): Redis holds neither value.
    const redis = new Redis(h.redis.url);
    try {
      const raw = JSON.stringify(await redis.hgetall('mcps:{a}'));
      assert.match(raw, /enc1:/);
      assert.ok(!raw.includes(TOKEN) && !raw.includes('secret-extra'), raw);
    } finally {
      redis.disconnect();
    }
    assert.equal((await apiB.get('/v1/mcp-servers/mine')).status, 404);
    assert.equal((await apiB.get('/v1/mcp-servers/mine')).body.error.code, 'mcp_server_not_found');
    assert.equal((await apiB.req('DELETE', '/v1/mcp-servers/mine')).status, 404);
    assert.deepEqual((await apiB.get('/v1/mcp-servers')).body.data, []);
  });

  it("another tenant's server of the same name is its own: each session uses its tenant's", async () => {
    // Tenant b's "mine" sends a wrong token: the MCP server refuses b's calls, never a's.
    const put = await apiB.req('PUT', '/v1/mcp-servers/mine', {
      url: mcp.url,
      headers: { authorization: 'Bearer wrong' },
    });
    assert.equal(put.status, 201, JSON.stringify(put.body));
    try {
      h.fake.enqueue(toolCall('echo', { text: 'b' }, { id: 'toolu_b' }), text('done'));
      const b = await apiB.post('/v1/sessions', { input: 'echo', tools: [{ mcp_server: 'mine' }] });
      assert.equal(b.status, 201, JSON.stringify(b.body));
      const doneB = await apiB.waitStatus(b.body.id, ['idle', 'failed', 'requires_action'], 30_000);
      assert.equal(doneB.status, 'idle', JSON.stringify(doneB));
      const resB = lastResults(h)[0];
      assert.equal(resB.is_error, true, JSON.stringify(resB));
      h.fake.reset();
      h.fake.enqueue(toolCall('echo', { text: 'a' }, { id: 'toolu_a' }), text('done'));
      const a = await api.post('/v1/sessions', { input: 'echo', tools: [{ mcp_server: 'mine' }] });
      const doneA = await api.waitStatus(a.body.id, ['idle', 'failed', 'requires_action'], 30_000);
      assert.equal(doneA.status, 'idle', JSON.stringify(doneA));
      assert.deepEqual(lastResults(h)[0].content, [{ type: 'text', text: 'echo: a' }]);
    } finally {
      assert.equal((await apiB.req('DELETE', '/v1/mcp-servers/mine')).status, 200);
    }
  });

  it('refuses bad input with 400: scheme, credentials, reserved or too many headers, line breaks, bad names', async () => {
    const bad: Array<[string, unknown]> = [
      ['ok', { url: 'ftp://example.com/mcp' }],
      ['ok', { url: 'http://u:p@127.0.0.1/mcp' }],
      ['ok', { url: mcp.url, headers: { host: 'evil' } }],
      ['ok', { url: mcp.url, headers: { 'x-a': 'one\r\nx-b: two' } }],
      [
        'ok',
        { url: mcp.url, headers: Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`x-${i}`, 'v'])) },
      ],
      [
        'ok',
        {
          url: mcp.url,
          headers: { 'x-a': 'v'.repeat(8000), 'x-b': 'v'.repeat(8000), 'x-c': 'v'.repeat(1000) },
        },
      ],
      ['ok', { url: mcp.url, extra: 1 }],
      ['no spaces', { url: mcp.url }],
    ];
    for (const [name, body] of bad) {
      const r = await api.req('PUT', `/v1/mcp-servers/${encodeURIComponent(name)}`, body);
      assert.equal(
        r.status,
        400,
        `${JSON.stringify(body).slice(0, 80)} → ${r.status} ${JSON.stringify(r.body)}`,
      );
      assert.match(r.body.error.code, /^(invalid_request|invalid_webhook_url)$/);
    }
    assert.equal((await api.get('/v1/mcp-servers/ok')).status, 404);
  });

  it("a session uses its tenant's server (with its headers); another tenant cannot name it", async () => {
    h.fake.enqueue(toolCall('echo', { text: 'hi' }, { id: 'toolu_t1' }), text('done'));
    const created = await api.post('/v1/sessions', { input: 'echo', tools: [{ mcp_server: 'mine' }] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    assert.deepEqual(lastResults(h)[0].content, [{ type: 'text', text: 'echo: hi' }]);
    const names = (h.fake.requests[0]!.body.tools as any[]).map((t) => t.name);
    assert.ok(names.includes('echo'));
    assert.ok(!names.includes('needs_task'), 'a tool that needs task-based execution is not offered');
    // The unauthenticated /metrics names no tool of a tenant's server (the tenant made its names up).
    const metrics = parseExposition(String((await h.api.get('/metrics')).body));
    const toolLabels = new Set(
      metrics.filter((m) => m.name === 'trs_tool_duration_seconds_count').map((m) => m.labels['tool']),
    );
    assert.ok(toolLabels.has('tenant_mcp'), [...toolLabels].join());
    assert.ok(!toolLabels.has('echo'), [...toolLabels].join());

    const b = await apiB.post('/v1/sessions', { input: 'echo', tools: [{ mcp_server: 'mine' }] });
    assert.equal(b.status, 400, JSON.stringify(b.body));
    assert.equal(b.body.error.code, 'unknown_tool');
    const toolsA = await api.get('/v1/tools');
    assert.ok(toolsA.body.data.some((t: any) => t.name === 'echo' && t.mcp_server === 'mine'));
    assert.ok(!toolsA.body.data.some((t: any) => t.name === 'needs_task'));
    const toolsB = await apiB.get('/v1/tools');
    assert.ok(toolsB.body.data.every((t: any) => t.mcp_server !== 'mine'));
    assert.ok(toolsB.body.mcp_servers.every((s: any) => s.name !== 'mine'));
  });

  it('a result over TOOL_RESULT_MAX_BYTES is an is_error naming the limit, cut on the wire (RSS stays flat)', async () => {
    const rss0 = process.memoryUsage().rss;
    h.fake.enqueue(
      toolCall('big', { bytes: 120_000_000 }, { id: 'toolu_huge' }),
      toolCall('big', { bytes: 150_000 }, { id: 'toolu_over' }),
      toolCall('big', { bytes: 50_000 }, { id: 'toolu_under' }),
      text('done'),
    );
    const created = await api.post('/v1/sessions', { input: 'big', tools: [{ mcp_server: 'mine' }] });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const id = created.body.id;
    const done = await api.waitStatus(id, ['idle', 'failed', 'requires_action'], 120_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const rss1 = process.memoryUsage().rss;
    assert.ok(rss1 - rss0 < 100 * 1024 * 1024, `RSS grew by ${Math.round((rss1 - rss0) / 1048576)} MB`);

    const msgs = await api.get(`/v1/sessions/${id}/messages`);
    assert.equal(msgs.status, 200, JSON.stringify(msgs.body).slice(0, 300));
    const results = (msgs.body.data as any[])
      .flatMap((m) => (Array.isArray(m.content) ? m.content : []))
      .filter((b: any) => b.type === 'tool_result');
    const byId = new Map(results.map((b: any) => [b.tool_use_id, b]));
    for (const tid of ['toolu_huge', 'toolu_over']) {
      const r = byId.get(tid);
      assert.equal(r?.is_error, true, JSON.stringify(r).slice(0, 300));
      assert.match(JSON.stringify(r.content), /TOOL_RESULT_MAX_BYTES/);
      assert.match(JSON.stringify(r.content), new RegExp(String(LIMIT)));
      assert.ok(JSON.stringify(r).length < 2000);
    }
    assert.notEqual(byId.get('toolu_under')?.is_error, true);
    assert.equal(JSON.stringify(byId.get('toolu_under')?.content).length > 50_000, true);
  });

  it('a result holding a lone surrogate is an is_error, never a string the Messages API refuses', async () => {
    // The server cuts '😀' (two UTF-16 units) after its first unit: the text sent back is `\ud83d` alone.
    h.fake.enqueue(
      toolCall('truncate', { text: 'ok 😀', units: 4 }, { id: 'toolu_cut' }),
      // An error result (the SDK's MCP helper throws its content as a ToolError) is held to the same rule.
      toolCall('truncate', { text: 'no 😀', units: 4, error: true }, { id: 'toolu_cut_error' }),
      toolCall('truncate', { text: 'ok 😀', units: 5 }, { id: 'toolu_whole' }),
      text('done'),
    );
    const id = (await api.post('/v1/sessions', { input: 'cut', tools: [{ mcp_server: 'mine' }] })).body.id;
    const done = await api.waitStatus(id, ['idle', 'failed', 'requires_action'], 60_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    for (const r of h.fake.requests) assert.ok(wellFormed(r.messages), 'every string sent is well-formed');
    const [cut] = (h.fake.requests[1]!.messages.at(-1) as any).content as any[];
    assert.equal(cut.is_error, true, JSON.stringify(cut));
    assert.match(JSON.stringify(cut.content), /lone surrogate/);
    const [cutError] = (h.fake.requests[2]!.messages.at(-1) as any).content as any[];
    assert.equal(cutError.is_error, true, JSON.stringify(cutError));
    assert.match(JSON.stringify(cutError.content), /failed with an error text that holds a lone surrogate/);
    const [whole] = lastResults(h);
    assert.notEqual(whole.is_error, true);
    assert.match(JSON.stringify(whole.content), /ok 😀/);
  });

  it('the tool list refreshes on notifications/tools/list_changed', async () => {
    const before = await api.get('/v1/tools');
    assert.ok(!before.body.data.some((t: any) => t.name === 'fresh_tool'));
    await mcp.addTool('fresh_tool');
    await until(async () => {
      const r = await api.get('/v1/tools');
      return r.body.data.some((t: any) => t.name === 'fresh_tool' && t.mcp_server === 'mine');
    }, 'the new tool listed');
  });

  it("a listed tool's description is cut at 10,000 characters", async () => {
    const big = await startMcpServer();
    try {
      await big.addTool('wordy', { describe: 12_000 });
      const put = await api.req('PUT', '/v1/mcp-servers/big', { url: big.url });
      assert.ok(put.status < 300, JSON.stringify(put.body));
      const listed = (await api.get('/v1/tools')).body;
      const wordy = listed.data.find((t: any) => t.mcp_server === 'big' && t.name === 'wordy');
      assert.ok(wordy, JSON.stringify(listed.mcp_servers));
      assert.equal(wordy.description.length, 10_000);
      assert.equal((await api.req('DELETE', '/v1/mcp-servers/big')).status, 200);
    } finally {
      await big.kill();
    }
  });

  it("Anthropic's MCP connector (mcp_servers + mcp_toolset) passes through to the Messages API", async () => {
    h.fake.enqueue(text('Connected.'));
    const mcpServers = [
      { type: 'url', name: 'remote', url: 'https://mcp.example.com/mcp', authorization_token: 'tok-remote' },
    ];
    const toolset = { type: 'mcp_toolset', mcp_server_name: 'remote', default_config: { enabled: true } };
    const created = await api.post('/v1/sessions', {
      input: 'use the remote tools',
      params: { betas: ['mcp-client-2025-11-20'], mcp_servers: mcpServers },
      tools: [toolset, { mcp_server: 'mine' }],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.deepEqual(created.body.tools[0], toolset);
    const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
    assert.equal(done.status, 'idle', JSON.stringify(done));
    const sent = h.fake.requests[0]!;
    assert.deepEqual(sent.body.mcp_servers, mcpServers);
    assert.deepEqual(
      (sent.body.tools as any[]).find((t) => t.type === 'mcp_toolset'),
      toolset,
    );
    assert.match(String(sent.headers['anthropic-beta']), /mcp-client-2025-11-20/);
    // The connector's token is the tenant's secret: the tenant key reads it back; a browser's client token, the
    // events (replayed to tokens, sent to webhooks) and a PATCH's events carry it redacted.
    const id = created.body.id as string;
    assert.equal(
      (await api.get(`/v1/sessions/${id}`)).body.params.mcp_servers[0].authorization_token,
      'tok-remote',
    );
    const minted = await api.post('/v1/client-tokens', { session_id: id, scopes: ['read', 'message'] });
    assert.equal(minted.status, 201, JSON.stringify(minted.body));
    const browser = api.as(minted.body.token);
    const seen = await browser.get(`/v1/sessions/${id}`);
    assert.equal(seen.status, 200, JSON.stringify(seen.body));
    assert.deepEqual(seen.body.params.mcp_servers, [{ ...mcpServers[0], authorization_token: '[redacted]' }]);
    const rotated = [{ ...mcpServers[0], authorization_token: 'tok-rotated' }];
    const patched = await api.req('PATCH', `/v1/sessions/${id}`, { params: { mcp_servers: rotated } });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    assert.equal(patched.body.params.mcp_servers[0].authorization_token, 'tok-rotated');
    h.fake.enqueue(text('Again.'));
    const posted = await browser.post(`/v1/sessions/${id}/messages`, { content: 'once more' });
    assert.ok(posted.status < 300, JSON.stringify(posted.body));
    assert.equal(posted.body.params.mcp_servers[0].authorization_token, '[redacted]');
    assert.equal((await api.waitStatus(id, ['idle', 'failed'], 30_000)).status, 'idle');
    assert.deepEqual(h.fake.requests[1]!.body.mcp_servers, rotated, 'the new token is the one sent');
    const log = JSON.stringify((await browser.get(`/v1/sessions/${id}/events?limit=1000`)).body);
    assert.ok(log.includes('session.created') && log.includes('params.updated'), log.slice(0, 300));
    assert.ok(!log.includes('tok-remote') && !log.includes('tok-rotated'), 'no token in the events');
    // Given twice: refused as any duplicate tool.
    const twice = await api.post('/v1/sessions', {
      input: 'x',
      params: { betas: ['mcp-client-2025-11-20'], mcp_servers: mcpServers },
      tools: [toolset, toolset],
    });
    assert.equal(twice.status, 400, JSON.stringify(twice.body));
    assert.equal(twice.body.error.code, 'duplicate_tool');
  });

  it('DELETE forgets the server; a new session cannot name it', async () => {
    // If-Match (contract §7: the rules of §3): the revision of the ETag, else 412 revision_mismatch.
    const got = await api.get('/v1/mcp-servers/mine');
    const etag = got.headers.get('etag');
    assert.equal(etag, `"${got.body.revision}"`);
    const stale = await api.req('DELETE', '/v1/mcp-servers/mine', undefined, { 'if-match': '"999"' });
    assert.equal(stale.status, 412);
    assert.equal(stale.body.error.code, 'revision_mismatch');
    assert.equal(stale.body.error.details.revision, got.body.revision);
    const stalePut = await api.req('PUT', '/v1/mcp-servers/mine', { url: mcp.url }, { 'if-match': '"999"' });
    assert.equal(stalePut.status, 412);
    assert.equal((await api.get('/v1/mcp-servers/mine')).body.revision, got.body.revision, 'unchanged');
    const del = await api.req('DELETE', '/v1/mcp-servers/mine', undefined, { 'if-match': etag! });
    assert.equal(del.status, 200, JSON.stringify(del.body));
    assert.deepEqual(del.body, { name: 'mine', object: 'mcp_server', deleted: true });
    assert.equal((await api.get('/v1/mcp-servers/mine')).status, 404);
    const s = await api.post('/v1/sessions', { input: 'echo', tools: [{ mcp_server: 'mine' }] });
    assert.equal(s.status, 400);
  });
});

describe(
  'MCP progress notices; the result bound of every tool the service runs',
  { timeout: 120_000 },
  () => {
    let h: Harness;
    let mcp: TestMcpServer;
    let api: Api;

    before(async () => {
      mcp = await startMcpServer({ token: TOKEN });
      h = await startHarness({
        env: {
          WEBHOOK_ALLOW_PRIVATE: 'true',
          // A call that reports progress outlives this: each notice starts it again.
          MCP_CALL_TIMEOUT_MS: '1500',
          // ...and none outlives this, however it reports progress.
          MCP_CALL_MAX_MS: '9000',
          TOOL_RESULT_MAX_BYTES: '2048',
          TEST_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'silent',
        },
      });
      api = h.api;
      const put = await api.req('PUT', '/v1/mcp-servers/mine', {
        url: mcp.url,
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      assert.equal(put.status, 201, JSON.stringify(put.body));
    });
    after(async () => {
      await h?.close();
      await mcp?.kill();
    });

    it('progress notices reset the call timeout and reach clients as tool.progress events, rate-limited', async () => {
      // 25 notices 250 ms apart: 6 s, four times the call timeout, with 4 notices a second where the rate allows 2.
      h.fake.enqueue(toolCall('progress', { steps: 25, ms: 250 }, { id: 'toolu_prog' }), text('done'));
      const created = await api.post('/v1/sessions', { input: 'progress', tools: [{ mcp_server: 'mine' }] });
      const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 60_000);
      assert.equal(done.status, 'idle', JSON.stringify(done));
      assert.deepEqual(lastResults(h)[0].content, [{ type: 'text', text: 'done after 25' }]);
      assert.notEqual(lastResults(h)[0].is_error, true);
      const progress = (await events(api, created.body.id)).filter((e) => e.type === 'tool.progress');
      assert.ok(progress.length >= 3, `${progress.length} progress events`);
      assert.ok(progress.length <= 17, `${progress.length} progress events: not rate-limited`);
      assert.deepEqual(Object.keys(progress[0]!.data).sort(), [
        'message',
        'name',
        'progress',
        'tool_use_id',
        'total',
      ]);
      assert.equal(progress[0]!.data.tool_use_id, 'toolu_prog');
      assert.deepEqual(progress.at(-1)!.data, {
        tool_use_id: 'toolu_prog',
        name: 'progress',
        progress: 25,
        total: 25,
        message: 'step 25',
      });
    });

    it('a call that reports progress for ever is cut at MCP_CALL_MAX_MS: an is_error result, the run goes on', async () => {
      // 80 notices 250 ms apart: 20 s, past the 9 s bound, though no gap reaches the 1.5 s call timeout.
      h.fake.enqueue(toolCall('progress', { steps: 80, ms: 250 }, { id: 'toolu_long' }), text('gave up'));
      const created = await api.post('/v1/sessions', { input: 'progress', tools: [{ mcp_server: 'mine' }] });
      const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 60_000);
      assert.equal(done.status, 'idle', JSON.stringify(done));
      const [r] = lastResults(h);
      assert.equal(r.tool_use_id, 'toolu_long');
      assert.equal(r.is_error, true);
      assert.match(JSON.stringify(r.content), /did not finish within 9000 ms \(MCP_CALL_MAX_MS\)/);
    });

    it('a server-run tool (memory) whose result passes TOOL_RESULT_MAX_BYTES answers is_error naming the limit', async () => {
      h.fake.enqueue(
        toolCall(
          'memory',
          { command: 'create', path: '/memories/big.txt', file_text: 'y'.repeat(4000) },
          { id: 'toolu_c' },
        ),
        toolCall('memory', { command: 'view', path: '/memories/big.txt' }, { id: 'toolu_v' }),
        text('done'),
      );
      const created = await api.post('/v1/sessions', { input: 'remember', tools: ['memory'] });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const done = await api.waitStatus(created.body.id, ['idle', 'failed', 'requires_action'], 30_000);
      assert.equal(done.status, 'idle', JSON.stringify(done));
      const [view] = lastResults(h);
      assert.equal(view.tool_use_id, 'toolu_v');
      assert.equal(view.is_error, true);
      assert.match(JSON.stringify(view.content), /at most 2048 bytes \(TOOL_RESULT_MAX_BYTES\)/);
    });
  },
);
