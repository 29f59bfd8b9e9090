/**
 * The typed client against a server that is not the API (a proxy's HTML page, a truncated body, a wrong content type
 * or shape, a WebSocket that sends something other than JSON frames, a Retry-After that is no delay): a real HTTP
 * server on 127.0.0.1 answers what each case needs. Every method, `waitFor`, `follow` and the `ToolWorker` must end
 * with a `ConnectionError` carrying the cause, never a raw `SyntaxError` or `TypeError`, and never a crash; a
 * Retry-After that is no delay is backed off from, not retried at once.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { ConnectionError, SessionsClient, ToolWorker } from '../../packages/client/src/index.js';

interface Answer {
  status?: number;
  type?: string | null;
  body: string;
  headers?: Record<string, string>;
}

/** A local HTTP (and WebSocket) server: each request is answered with `next(req)`; each socket gets `frames`. */
async function badServer() {
  const hits: Array<{ method: string; url: string; at: number }> = [];
  const state: { next: (req: http.IncomingMessage) => Answer; frames: string[] } = {
    next: () => ({ body: '' }),
    frames: [],
  };
  const server = http.createServer((req, res) => {
    hits.push({ method: req.method!, url: req.url!, at: Date.now() });
    req.resume();
    const a = state.next(req);
    const headers: Record<string, string> = { ...a.headers };
    if (a.type !== null) headers['content-type'] = a.type ?? 'application/json; charset=utf-8';
    res.writeHead(a.status ?? 200, headers);
    res.end(a.body);
  });
  const wss = new WebSocketServer({ server, handleProtocols: (p) => [...p][0] ?? false });
  wss.on('connection', (ws) => {
    for (const f of state.frames) ws.send(f);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits,
    state,
    close: async () => {
      for (const ws of wss.clients) ws.terminate();
      await new Promise((r) => wss.close(r));
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}

const HTML = '<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>';
const SESSION = JSON.stringify({ id: 'ses_x', object: 'session', status: 'running', revision: 1 });

/** Asserts `p` rejects with a ConnectionError (whose cause is `cause` when given), saying `what`. */
async function notTheApi(p: Promise<unknown>, what: string, cause?: new (...a: never[]) => Error) {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof ConnectionError, `${what}: ${String(err)}`);
    if (cause) assert.ok(err.cause instanceof cause, `${what}: cause ${String(err.cause)}`);
    return true;
  });
}

describe('the typed client against a server that is not the API', () => {
  let s: Awaited<ReturnType<typeof badServer>>;
  let client: SessionsClient;
  before(async () => {
    s = await badServer();
    client = new SessionsClient({ baseUrl: s.url, apiKey: 'k', WebSocket, maxRetries: 0 });
  });
  after(async () => s?.close());

  /** Every method of the client, each sending one request. */
  const methods = (): Record<string, () => Promise<unknown>> => ({
    createSession: () => client.createSession({ input: 'x' }),
    listSessions: () => client.listSessions(),
    getSession: () => client.getSession('ses_x'),
    deleteSession: () => client.deleteSession('ses_x'),
    addMessage: () => client.addMessage('ses_x', { text: 'y' }),
    decideToolCall: () => client.decideToolCall('ses_x', 'toolu_x', { decision: 'approve' }),
    putToolResult: () => client.putToolResult('ses_x', 'toolu_x', { content: 'y' }),
    submitToolResults: () =>
      client.submitToolResults('ses_x', { results: [{ tool_use_id: 'toolu_x', content: 'y' }] }),
    updateSession: () => client.updateSession('ses_x', { metadata: { a: 'b' } }),
    continueSession: () => client.continueSession('ses_x'),
    retrySession: () => client.retrySession('ses_x'),
    cancelSession: () => client.cancelSession('ses_x'),
    resumeSession: () => client.resumeSession('ses_x'),
    forkSession: () => client.forkSession('ses_x', { at_iteration: 0 }),
    compactSession: () => client.compactSession('ses_x'),
    listMessages: () => client.listMessages('ses_x'),
    listChildren: () => client.listChildren('ses_x'),
    listIterations: () => client.listIterations('ses_x'),
    getIteration: () => client.getIteration('ses_x', 1),
    listEvents: () => client.listEvents('ses_x'),
    replaceMessages: () => client.replaceMessages('ses_x', [{ role: 'user', content: 'y' }]),
    listTools: () => client.listTools(),
    putTool: () =>
      client.putTool('t', { description: 'd', input_schema: { type: 'object' }, runner: { type: 'worker' } }),
    getTool: () => client.getTool('t'),
    deleteTool: () => client.deleteTool('t'),
    claimToolTasks: () => client.claimToolTasks({ tools: ['t'], wait_ms: 0 }),
    heartbeatToolTask: () => client.heartbeatToolTask('tt_x'),
    submitToolTaskResult: () => client.submitToolTaskResult('tt_x', { content: 'y' }),
    putMcpServer: () => client.putMcpServer('m', { url: 'http://127.0.0.1:9/mcp' }),
    listMcpServers: () => client.listMcpServers(),
    getMcpServer: () => client.getMcpServer('m'),
    deleteMcpServer: () => client.deleteMcpServer('m'),
    createWebhook: () => client.createWebhook({ url: 'http://127.0.0.1:9/hook' }),
    listWebhooks: () => client.listWebhooks(),
    getWebhook: () => client.getWebhook('wh_x'),
    updateWebhook: () => client.updateWebhook('wh_x', { description: 'y' }),
    deleteWebhook: () => client.deleteWebhook('wh_x'),
    listWebhookDeliveries: () => client.listWebhookDeliveries('wh_x'),
    testWebhook: () => client.testWebhook('wh_x'),
    listMemory: () => client.listMemory(),
    getMemoryFile: () => client.getMemoryFile('notes/a.md'),
    deleteMemoryFile: () => client.deleteMemoryFile('notes/a.md'),
    createClientToken: () => client.createClientToken({ session_id: 'ses_x', scopes: ['read'] }),
    deleteClientToken: () => client.deleteClientToken('ct_x'),
    createSchedule: () => client.createSchedule({ cron: '0 3 * * *', session: { input: 'x' } }),
    listSchedules: () => client.listSchedules(),
    getSchedule: () => client.getSchedule('sch_x'),
    updateSchedule: () => client.updateSchedule('sch_x', { paused: true }),
    deleteSchedule: () => client.deleteSchedule('sch_x'),
    listScheduleRuns: () => client.listScheduleRuns('sch_x'),
    listScheduleEvents: () => client.listScheduleEvents('sch_x'),
    getUsage: () => client.getUsage(),
    waitFor: () => client.waitFor('ses_x', 'idle', { timeoutMs: 5000 }),
  });

  it('a 2xx HTML page or a truncated JSON body is a ConnectionError from every method and waitFor', async () => {
    const bodies: Array<[string, Answer]> = [
      ['an HTML page', { type: 'text/html', body: HTML }],
      ['an HTML page said to be JSON', { body: HTML }],
      ['a truncated JSON body', { body: SESSION.slice(0, 20) }],
    ];
    for (const [what, answer] of bodies) {
      s.state.next = () => answer;
      for (const [name, call] of Object.entries(methods())) {
        await notTheApi(call(), `${name}, ${what}`, answer.type ? undefined : SyntaxError);
      }
    }
  });

  it('a 2xx JSON body of another content type or shape is a ConnectionError', async () => {
    // JSON, but not said to be: the service types every JSON answer application/json.
    s.state.next = () => ({ type: 'text/plain', body: SESSION });
    for (const [name, call] of Object.entries(methods())) await notTheApi(call(), `${name}, text/plain`);
    // No JSON object: every answer of the API is one.
    for (const body of ['null', '[]', '"ok"', '42']) {
      s.state.next = () => ({ body });
      for (const [name, call] of Object.entries(methods())) await notTheApi(call(), `${name}, ${body}`);
    }
    // An object, but not a session / not a page where one is the answer.
    s.state.next = () => ({ body: '{"hello":"world"}' });
    await notTheApi(client.getSession('ses_x'), 'getSession, not a session');
    await notTheApi(client.createSession({ input: 'x' }), 'createSession, not a session');
    await notTheApi(client.waitFor('ses_x', 'idle', { timeoutMs: 5000 }), 'waitFor, not a session');
    await notTheApi(client.listSessions(), 'listSessions, not a page');
    await notTheApi(client.listEvents('ses_x'), 'listEvents, not a page');
    await notTheApi(
      client.replaceMessages('ses_x', [{ role: 'user', content: 'y' }]),
      'replaceMessages, not a session',
    );
    for (const name of [
      'listTools',
      'listMcpServers',
      'listWebhooks',
      'listWebhookDeliveries',
      'listMemory',
      'listSchedules',
      'listScheduleRuns',
      'listScheduleEvents',
      'getUsage',
    ]) {
      await notTheApi(methods()[name]!(), `${name}, not a page`);
    }
    // A JSON answer without a content type is read by its body: the API's shapes pass.
    s.state.next = () => ({ type: null, body: SESSION });
    assert.equal((await client.getSession('ses_x')).id, 'ses_x');
    s.state.next = () => ({
      type: 'application/json',
      body: '{"data":[],"next_cursor":null,"has_more":false}',
    });
    assert.deepEqual((await client.listSessions()).data, []);
  });

  it('follow() ends with a ConnectionError at a frame that is not JSON (or not an object), without a crash', async () => {
    for (const frame of ['<html>hello</html>', 'null', '[1,2]']) {
      s.state.frames = [frame];
      await notTheApi(
        (async () => {
          for await (const _ of client.follow('ses_x', { maxReconnects: 0 }));
        })(),
        `follow, frame ${frame}`,
      );
    }
    // An event before the bad frame is yielded first.
    const ev = { id: '1-0', session_id: 'ses_x', type: 'session.status', at: 'x', revision: 2, data: {} };
    s.state.frames = [JSON.stringify(ev), '{"id":'];
    const seen: string[] = [];
    await notTheApi(
      (async () => {
        for await (const e of client.follow('ses_x', { maxReconnects: 0 })) seen.push(e.id);
      })(),
      'follow, a truncated frame',
      SyntaxError,
    );
    assert.deepEqual(seen, ['1-0']);
    s.state.frames = [];
  });

  it('the ToolWorker tells onError a ConnectionError for a claim answered with HTML, an ApiError-like status for a 502 page', async () => {
    const errors: unknown[] = [];
    let claims = 0;
    const gotTwo = Promise.withResolvers<void>();
    s.state.next = (req) => {
      if (!req.url!.endsWith('/claim')) return { body: '{}' };
      claims++;
      if (claims === 1) return { type: 'text/html', body: HTML };
      if (claims === 2) return { status: 502, type: 'text/html', body: HTML };
      if (claims === 3) return { body: '{"tasks":"none"}' };
      gotTwo.resolve();
      return { body: '{"tasks":[]}' };
    };
    const worker = new ToolWorker({
      baseUrl: s.url,
      tools: [{ name: 't', description: 'd', input_schema: { type: 'object' }, run: () => 'x' }],
      register: false,
      waitMs: 0,
      onError: (err) => errors.push(err),
    });
    void worker.start();
    await gotTwo.promise;
    await worker.stop();
    assert.equal(errors.length, 3, errors.map(String).join('; '));
    assert.ok(errors[0] instanceof ConnectionError, String(errors[0]));
    assert.ok(errors[0].cause instanceof SyntaxError);
    assert.match(String(errors[1]), /HTTP 502/);
    assert.ok(errors[2] instanceof ConnectionError, String(errors[2]));
  });

  it('Retry-After that is no delay (negative, NaN, garbage) is replaced by the backoff, not an immediate retry', async () => {
    const retrying = new SessionsClient({ baseUrl: s.url, maxRetries: 1, baseDelayMs: 400 });
    for (const value of ['-5', 'NaN', '0x10', 'soon']) {
      s.hits.length = 0;
      s.state.next = () =>
        s.hits.length === 1
          ? {
              status: 429,
              headers: { 'retry-after': value },
              body: '{"error":{"code":"rate_limited","message":"Too many requests."}}',
            }
          : { body: SESSION };
      assert.equal((await retrying.getSession('ses_x')).id, 'ses_x');
      assert.equal(s.hits.length, 2);
      // The backoff's first wait is between half the base delay and the base delay.
      const waited = s.hits[1]!.at - s.hits[0]!.at;
      assert.ok(waited >= 190 && waited < 2000, `Retry-After: ${value} waited ${waited} ms`);
    }
    // An HTTP-date is honoured: 2.5 s ahead (whole seconds: 1.5 to 2.5 s).
    s.hits.length = 0;
    const at = new Date(Date.now() + 2500).toUTCString();
    s.state.next = () =>
      s.hits.length === 1
        ? {
            status: 503,
            headers: { 'retry-after': at },
            body: '{"error":{"code":"store_unavailable","message":"x"}}',
          }
        : { body: SESSION };
    assert.equal((await retrying.getSession('ses_x')).id, 'ses_x');
    const waited = s.hits[1]!.at - s.hits[0]!.at;
    assert.ok(waited >= 1400 && waited < 3500, `Retry-After: ${at} waited ${waited} ms`);
  });
});
