/**
 * Client tokens (spec §7.2): minted by a tenant key for one session; each scope allows its routes and WebSocket
 * frames and nothing else; another session is 404; expiry 401 `token_expired`; revocation and session deletion 401
 * `unauthorized`, at once, on another replica too; an open stream ends when its token does.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { startHarness, type Api, type Harness } from '../helpers/service.js';
import { startTestRedis, type TestRedis } from '../helpers/redis.js';
import { serviceEnv, spawnService, type ServiceProcess } from '../helpers/process.js';
import { hang, text, toolCalls, toolUse } from '../fake/script.js';
import { startFakeAnthropic, type FakeAnthropic } from '../fake/server.js';
import { connectSse, connectWs, readLog, UpgradeRefused } from '../fixtures/event-clients.js';
import { sseDataLines } from '../helpers/chat.js';

const KEYS = 'acme:key-acme,globex:key-globex';
const HOUR_MS = 3_600_000;

const mint = (api: Api, body: Record<string, unknown>) => api.post('/v1/client-tokens', body);

async function token(api: Api, sessionId: string, scopes: string[], subject?: string): Promise<string> {
  const r = await mint(api, { session_id: sessionId, scopes, ...(subject ? { subject } : {}) });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.token as string;
}

const refused = (status: number, code: string) => (err: unknown) => {
  assert.ok(err instanceof UpgradeRefused, String(err));
  assert.equal(err.status, status);
  assert.equal(err.body.error.code, code);
  return true;
};

describe('client tokens', () => {
  let h: Harness;
  let r: Redis;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS, STREAM_HEARTBEAT_MS: '200' } });
    r = new Redis(h.redis.url);
  });
  after(async () => {
    r.disconnect();
    await h.close();
  });
  beforeEach(() => h.fake.reset());

  it('is minted by a tenant key for its own session, bounded, with expires_at = now + ttl_s', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const before = Date.now();
    const res = await mint(h.api, { session_id: id, scopes: ['read', 'message'], subject: 'user-42' });
    assert.equal(res.status, 201);
    const b = res.body;
    assert.match(b.id, /^ctk_/);
    assert.match(b.token, /^ct_/);
    assert.equal(b.session_id, id);
    assert.deepEqual(b.scopes, ['read', 'message']);
    assert.equal(b.subject, 'user-42');
    const exp = Date.parse(b.expires_at);
    assert.ok(exp >= before + 900_000 && exp <= Date.now() + 900_000, 'default ttl_s is 900');
    const short = await mint(h.api, { session_id: id, scopes: ['read'], ttl_s: 60 });
    assert.ok(Math.abs(Date.parse(short.body.expires_at) - (Date.now() + 60_000)) < 5000);
    // The record lives in the session's hash, hashed (never the token), kept an hour past the longest expiry.
    const fields = await r.hgetall(`s:{${id}}:ct`);
    assert.ok(!JSON.stringify(fields).includes(b.token), 'the token itself is not stored');
    assert.equal(Object.keys(fields).length, 4);
    const pttl = await r.pttl(`s:{${id}}:ct`);
    assert.ok(pttl > 900_000 + HOUR_MS - 10_000 && pttl <= 900_000 + HOUR_MS, `pttl ${pttl}`);

    for (const bad of [
      { session_id: id, scopes: [] },
      { session_id: id, scopes: ['write'] },
      { session_id: id, scopes: ['read'], ttl_s: 59 },
      { session_id: id, scopes: ['read'], ttl_s: 86_401 },
      { session_id: id, scopes: ['read'], subject: 'x'.repeat(257) },
      // Control, bidi, zero-width and line-separator characters: a `by` must show what it is.
      { session_id: id, scopes: ['read'], subject: 'user\u0007' },
      { session_id: id, scopes: ['read'], subject: 'admin\u202e24-resu' },
      { session_id: id, scopes: ['read'], subject: 'us\u200ber' },
      { session_id: id, scopes: ['read'], subject: 'user\u2028x' },
      { session_id: id, scopes: ['read'], extra: 1 },
      { session_id: 'no pe', scopes: ['read'] },
    ]) {
      const res = await mint(h.api, bad);
      assert.equal(res.status, 400, JSON.stringify(bad));
      assert.equal(res.body.error.code, 'invalid_request');
    }
    // A subject is a `by` no one else writes: not the service's own (a deadline's denial is `"by": "timeout"`,
    // §7.4), nor a token id (the `by` of a token minted without a subject: this one's, `b.id`, or any `ctk_…`).
    for (const subject of ['timeout', b.id, 'ctk_anything']) {
      const res = await mint(h.api, { session_id: id, scopes: ['read'], subject });
      assert.equal(res.status, 400, subject);
      assert.equal(res.body.error.code, 'invalid_request');
      assert.deepEqual(
        res.body.error.details.map((d: { path: string }) => d.path),
        ['/subject'],
        JSON.stringify(res.body),
      );
      assert.match(res.body.error.details[0].message, /reserved/);
    }
    // Only those: a subject that merely resembles one is someone's.
    for (const subject of ['Timeout', 'timeout-bot', 'user-ctk_1', 'ctk']) {
      const res = await mint(h.api, { session_id: id, scopes: ['read'], subject });
      assert.equal(res.status, 201, `${subject}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.subject, subject);
    }
    // A scope named twice counts once, whatever the length of the list (up to 20 names).
    const all = ['read', 'message', 'decide', 'results', 'cancel'];
    const twice = await mint(h.api, { session_id: id, scopes: [...all, 'read'] });
    assert.equal(twice.status, 201, JSON.stringify(twice.body));
    assert.deepEqual(twice.body.scopes, all);
    assert.equal((await mint(h.api, { session_id: id, scopes: Array(21).fill('read') })).status, 400);
    // The same Idempotency-Key at once: one token, the others its replay or 409 idempotency_in_progress (declared).
    const keyed = await Promise.all(
      [1, 2, 3, 4].map(() =>
        h.api.req(
          'POST',
          '/v1/client-tokens',
          { session_id: id, scopes: ['read'] },
          { 'idempotency-key': 'mint-1' },
        ),
      ),
    );
    for (const k of keyed)
      assert.ok(
        k.status === 201 || (k.status === 409 && k.body.error.code === 'idempotency_in_progress'),
        JSON.stringify(k.body),
      );
    assert.equal(new Set(keyed.filter((k) => k.status === 201).map((k) => k.body.token)).size, 1);
    const foreign = await mint(h.api.as('key-globex'), { session_id: id, scopes: ['read'] });
    assert.equal(foreign.status, 404);
    assert.equal(foreign.body.error.code, 'session_not_found');
    assert.equal((await mint(h.api.as('nope'), { session_id: id, scopes: ['read'] })).status, 401);
  });

  it('read: the session, its messages, iterations, events (JSON, SSE) and stream; nothing else', async () => {
    h.fake.enqueue(text('Hello.'));
    const created = await h.api.post('/v1/sessions', { input: 'Hi' });
    const id = created.body.id as string;
    await h.api.waitStatus(id, 'idle');
    const other = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t = await token(h.api, id, ['read']);
    const api = h.api.as(t);
    for (const path of ['', '/messages', '/iterations', '/iterations/1', '/events'])
      assert.equal((await api.get(`/v1/sessions/${id}${path}`)).status, 200, path);
    const sse = await connectSse(h.service.url, id, { token: t });
    assert.equal(sse.status, 200);
    await sse.waitEvent((e) => e.type === 'turn.completed', 'replay over SSE');
    sse.close();
    const ws = await connectWs(h.service.url, id, { protocolToken: t });
    assert.equal(ws.ws.protocol, 'bearer');
    await ws.waitEvent((e) => e.type === 'turn.completed', 'replay over the WebSocket');
    ws.close();

    // Another session: 404, as for another tenant's, on the routes no token may use too (fork, delete).
    for (const path of ['', '/messages', '/events']) {
      const res = await api.get(`/v1/sessions/${other}${path}`);
      assert.equal(res.status, 404, path);
      assert.equal(res.body.error.code, 'session_not_found');
    }
    for (const [method, path] of [
      ['POST', `/v1/sessions/${other}/fork`],
      ['DELETE', `/v1/sessions/${other}`],
    ] as const) {
      const res = await api.req(method, path, method === 'POST' ? {} : undefined);
      assert.equal(res.status, 404, `${method} ${path}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error.code, 'session_not_found');
    }
    // No route: 404 route_not_found, as for a key.
    const nowhere = await api.get('/v1/nowhere');
    assert.equal(nowhere.status, 404, JSON.stringify(nowhere.body));
    assert.equal(nowhere.body.error.code, 'route_not_found');
    await assert.rejects(
      connectWs(h.service.url, other, { protocolToken: t }),
      refused(404, 'session_not_found'),
    );
    // Anything else: 403 scope_denied (the routes of its session beyond its scopes, and every other route).
    const denied: Array<[string, string, unknown?]> = [
      ['GET', '/v1/sessions'],
      ['POST', '/v1/sessions', { start: false }],
      ['DELETE', `/v1/sessions/${id}`],
      ['PATCH', `/v1/sessions/${id}`, { metadata: { a: '1' } }],
      ['POST', `/v1/sessions/${id}/messages`, { text: 'more' }],
      ['POST', `/v1/sessions/${id}/cancel`, {}],
      ['POST', `/v1/sessions/${id}/retry`, {}],
      ['POST', `/v1/sessions/${id}/fork`, { at_iteration: 1 }],
      ['POST', `/v1/sessions/${id}/continue`, {}],
      ['POST', `/v1/sessions/${id}/tool-calls/toolu_1`, { decision: 'approve' }],
      ['PUT', `/v1/sessions/${id}/tool-results/toolu_1`, { content: 'x' }],
      ['POST', '/v1/client-tokens', { session_id: id, scopes: ['read'] }],
      ['GET', '/v1/tools'],
      ['GET', '/v1/webhooks'],
      ['GET', '/v1/memory'],
    ];
    for (const [method, path, body] of denied) {
      const res = await api.req(method, path, body);
      assert.equal(res.status, 403, `${method} ${path}: ${JSON.stringify(res.body)}`);
      assert.equal(res.body.error.code, 'scope_denied');
    }
    // And every WebSocket frame.
    const c = await connectWs(h.service.url, id, { token: t });
    for (const frame of [
      { type: 'message', ref: 'm', text: 'x' },
      { type: 'tool_call.decide', ref: 'd', tool_use_id: 'toolu_1', decision: 'approve' },
      { type: 'tool_result', ref: 'r', tool_use_id: 'toolu_1', content: 'x' },
      { type: 'cancel', ref: 'c' },
    ]) {
      const out = await c.request(frame);
      assert.equal(out.type, 'error');
      assert.equal(out.error.code, 'scope_denied', frame.type);
    }
    c.close();
  });

  it('message: posts over REST and as a frame, recorded `by` its subject; the key records none', async () => {
    h.fake.enqueue(text('One.'), text('Two.'), text('Three.'));
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t = await token(h.api, id, ['message'], 'user-7');
    const posted = await h.api.as(t).post(`/v1/sessions/${id}/messages`, { text: 'first' });
    assert.equal(posted.status, 202);
    await h.api.waitStatus(id, 'idle');
    // `message` alone does not read (reads need `read`).
    assert.equal((await h.api.as(t).get(`/v1/sessions/${id}`)).status, 403);
    const rw = await token(h.api, id, ['read', 'message']);
    const c = await connectWs(h.service.url, id, { protocolToken: rw });
    const ack = await c.request({ type: 'message', ref: 'm1', text: 'second' });
    assert.equal(ack.type, 'ack');
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 2);
    c.close();
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'third' });
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 3);
    const queued = (await readLog(h.service.url, id, 'key-acme')).filter((e) => e.type === 'message.queued');
    assert.deepEqual(
      queued.map((e) => e.data.by),
      ['user-7', (await tokenIdOf(r, id, rw)) ?? 'missing', undefined],
    );
  });

  it('decide: tool-call decisions over REST and as a frame, recorded `by`', async () => {
    h.fake.enqueue(
      toolCalls([
        toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_a'),
        toolUse('calculate_sum', { a: 3, b: 4 }, 'toolu_b'),
      ]),
      text('Done.'),
    );
    const id = (
      await h.api.post('/v1/sessions', { input: 'Add', tools: ['calculate_sum'], approval: 'always' })
    ).body.id as string;
    await h.api.waitStatus(id, 'requires_action');
    const reader = await token(h.api, id, ['read']);
    const denied = await h.api
      .as(reader)
      .post(`/v1/sessions/${id}/tool-calls/toolu_a`, { decision: 'approve' });
    assert.equal(denied.status, 403);
    const t = await token(h.api, id, ['read', 'decide'], 'reviewer');
    const ok = await h.api.as(t).post(`/v1/sessions/${id}/tool-calls/toolu_a`, { decision: 'approve' });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    const c = await connectWs(h.service.url, id, { token: t });
    const ack = await c.request({
      type: 'tool_call.decide',
      ref: 'd',
      tool_use_id: 'toolu_b',
      decision: 'deny',
      reason: 'no',
    });
    assert.equal(ack.type, 'ack', JSON.stringify(ack));
    c.close();
    await h.api.waitStatus(id, 'idle');
    const decided = (await readLog(h.service.url, id, 'key-acme')).filter(
      (e) => e.type === 'tool_call.decided',
    );
    assert.deepEqual(
      decided.map((e) => [e.data.tool_use_id, e.data.decision, e.data.by]),
      [
        ['toolu_a', 'approve', 'reviewer'],
        ['toolu_b', 'deny', 'reviewer'],
      ],
    );
  });

  it('results: client tool results and continue over REST and as a frame', async () => {
    const lookup = { name: 'lookup', description: 'Look up', input_schema: { type: 'object' } };
    h.fake.enqueue(
      toolCalls([toolUse('lookup', { q: 1 }, 'toolu_1'), toolUse('lookup', { q: 2 }, 'toolu_2')]),
      text('Thanks.'),
    );
    const id = (await h.api.post('/v1/sessions', { input: 'Look', tools: [lookup] })).body.id as string;
    await h.api.waitStatus(id, 'requires_action');
    const decider = await token(h.api, id, ['decide']);
    const deniedPut = await h.api
      .as(decider)
      .req('PUT', `/v1/sessions/${id}/tool-results/toolu_1`, { content: 'a' });
    assert.equal(deniedPut.status, 403);
    const deniedFrame = await connectWs(h.service.url, id, { token: await token(h.api, id, ['read']) });
    const no = await deniedFrame.request({
      type: 'tool_result',
      ref: 'x',
      tool_use_id: 'toolu_1',
      content: 'a',
    });
    assert.equal(no.error.code, 'scope_denied');
    deniedFrame.close();
    const t = await token(h.api, id, ['read', 'results']);
    const put = await h.api.as(t).req('PUT', `/v1/sessions/${id}/tool-results/toolu_1`, { content: 'one' });
    assert.ok(put.status === 200 || put.status === 202, JSON.stringify(put.body));
    const c = await connectWs(h.service.url, id, { token: t });
    const ack = await c.request({ type: 'tool_result', ref: 'r', tool_use_id: 'toolu_2', content: 'two' });
    assert.equal(ack.type, 'ack', JSON.stringify(ack));
    c.close();
    await h.api.waitStatus(id, 'idle');
    // `continue` is a `results` route too: refused to another scope, answered (409: nothing to continue) to it.
    assert.equal((await h.api.as(decider).post(`/v1/sessions/${id}/continue`)).status, 403);
    assert.equal((await h.api.as(t).post(`/v1/sessions/${id}/continue`)).status, 409);
    assert.equal(
      (await h.api.as(t).post(`/v1/sessions/${id}/tool-results`, { results: [] })).status !== 403,
      true,
    );
  });

  it('cancel: over REST and as a frame', async () => {
    h.fake.enqueue(hang(), hang());
    const id = (await h.api.post('/v1/sessions', { input: 'Wait' })).body.id as string;
    await h.fake.waitForRequests(1);
    const reader = await token(h.api, id, ['read', 'message']);
    assert.equal((await h.api.as(reader).post(`/v1/sessions/${id}/cancel`)).status, 403);
    const t = await token(h.api, id, ['read', 'cancel', 'message']);
    assert.equal((await h.api.as(t).post(`/v1/sessions/${id}/cancel`)).status, 200);
    await h.api.waitStatus(id, 'idle');
    assert.equal((await h.api.as(t).post(`/v1/sessions/${id}/messages`, { text: 'again' })).status, 202);
    await h.fake.waitForRequests(2);
    const c = await connectWs(h.service.url, id, { token: t });
    const ack = await c.request({ type: 'cancel', ref: 'c' });
    assert.equal(ack.type, 'ack', JSON.stringify(ack));
    c.close();
    const s = await h.api.waitStatus(id, 'idle');
    assert.equal(s.stop_reason, 'cancelled');
  });

  it("without read, a change's answer is the session's receipt: nothing of its params, tools, calls or usage", async () => {
    const lookup = { name: 'lookup', description: 'Look up', input_schema: { type: 'object' } };
    h.fake.enqueue(
      toolCalls([
        toolUse('lookup', { q: 'secret plan' }, 'toolu_r'),
        toolUse('calculate_sum', { a: 1, b: 2 }, 'toolu_c'),
      ]),
      text('Thanks.'),
      toolCalls([toolUse('lookup', { q: 'again' }, 'toolu_s')]),
      text('Noted.'),
      hang(),
      text('Done.'),
    );
    const id = (
      await h.api.post('/v1/sessions', {
        start: false,
        params: { system: 'You are the tenant prompt.' },
        tools: [lookup, 'calculate_sum'],
        approval: ['calculate_sum'],
        metadata: { customer: 'c-42' },
      })
    ).body.id as string;
    const receipt = ['created_at', 'id', 'object', 'revision', 'status', 'updated_at'];
    const t = h.api.as(await token(h.api, id, ['message', 'decide', 'results', 'cancel']));
    const isReceipt = (
      r: { status: number; body: Record<string, unknown>; headers: Headers },
      what: string,
    ) => {
      assert.ok(r.status === 200 || r.status === 202, `${what}: ${r.status} ${JSON.stringify(r.body)}`);
      assert.deepEqual(Object.keys(r.body).sort(), receipt, what);
      assert.equal(r.headers.get('etag'), `"${String(r.body['revision'])}"`, what);
    };
    isReceipt(await t.post(`/v1/sessions/${id}/messages`, { text: 'Look' }), 'message');
    await h.api.waitStatus(id, 'requires_action');
    // A refusal names the pending calls (with their inputs) only to a caller that may read the session.
    const early = await t.post(`/v1/sessions/${id}/continue`);
    assert.equal(early.status, 409, JSON.stringify(early.body));
    assert.equal(early.body.error.code, 'tool_calls_undecided');
    assert.equal(early.body.error.details?.required_action, undefined, JSON.stringify(early.body));
    assert.ok(!JSON.stringify(early.body).includes('secret plan'));
    const keyed = await h.api.post(`/v1/sessions/${id}/continue`);
    assert.ok(keyed.body.error.details.required_action, JSON.stringify(keyed.body));
    isReceipt(
      await t.post(`/v1/sessions/${id}/tool-results`, {
        results: [{ tool_use_id: 'toolu_r', content: 'ok' }],
      }),
      'POST tool-results',
    );
    isReceipt(await t.post(`/v1/sessions/${id}/tool-calls/toolu_c`, { decision: 'approve' }), 'decide');
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 2);
    await t.post(`/v1/sessions/${id}/messages`, { text: 'More' });
    await h.api.waitStatus(id, 'requires_action');
    isReceipt(
      await t.req('PUT', `/v1/sessions/${id}/tool-results/toolu_s`, { content: 'ok' }),
      'PUT tool-results',
    );
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 4);
    await t.post(`/v1/sessions/${id}/messages`, { text: 'Wait' });
    await h.fake.waitForRequests(5);
    isReceipt(await t.post(`/v1/sessions/${id}/cancel`), 'cancel');
    await h.api.waitStatus(id, 'idle');
    // With `read` (or a key) the answer is the session, as a GET shows it; its keyed replay to a token of the same
    // session without `read` (the tokens of one session share their keys) is the receipt again.
    const reader = h.api.as(await token(h.api, id, ['read', 'message']));
    const key = { 'idempotency-key': 'page-1' };
    const whole = await reader.post(`/v1/sessions/${id}/messages`, { text: 'Again' }, key);
    assert.equal(whole.body.params.system, 'You are the tenant prompt.');
    assert.deepEqual(whole.body.metadata, { customer: 'c-42' });
    const replayed = await t.post(`/v1/sessions/${id}/messages`, { text: 'Again' }, key);
    assert.equal(replayed.headers.get('idempotent-replayed'), 'true');
    isReceipt(replayed, 'replay');
    await h.api.waitFor(id, (s) => s.status === 'idle' && s.iteration === 5);
  });

  it('chat routes: read for the stream and messages; POST /v1/chat needs the scope of what it posts', async () => {
    h.fake.enqueue(text('Hello from chat.'));
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const other = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const body = (sid: string) => ({
      id: sid,
      trigger: 'submit-message',
      messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'Hi' }] }],
    });
    const reader = h.api.as(await token(h.api, id, ['read']));
    assert.equal((await reader.get(`/v1/chat/${id}/messages`)).status, 200);
    assert.equal((await reader.get(`/v1/chat/${other}/messages`)).status, 404);
    const denied = await reader.post('/v1/chat', body(id));
    assert.equal(denied.status, 403);
    assert.equal(denied.body.error.code, 'scope_denied');
    const decider = h.api.as(await token(h.api, id, ['decide']));
    const noMessage = await decider.post('/v1/chat', body(id));
    assert.equal(noMessage.status, 403, 'a user message needs `message`');
    const writer = h.api.as(await token(h.api, id, ['read', 'message'], 'chat-user'));
    assert.equal((await writer.post('/v1/chat', body(other))).status, 404, 'another session');
    // Another session is 404 whatever the token's scopes (spec §7.2), none of POST /v1/chat's included: the session
    // (the body's id) is checked before the route's scope.
    for (const scopes of [['read'], ['cancel'], ['decide'], ['read', 'message']]) {
      const res = await h.api.as(await token(h.api, id, scopes)).post('/v1/chat', body(other));
      assert.equal(res.status, 404, `another session, scopes ${scopes.join(',')}`);
      assert.equal(res.body.error.code, 'session_not_found');
    }
    const ok = await writer.post('/v1/chat', body(id));
    assert.equal(ok.status, 200);
    assert.match(String(ok.body), /Hello from chat/);
    const queued = (await readLog(h.service.url, id, 'key-acme')).filter((e) => e.type === 'message.queued');
    assert.deepEqual(
      queued.map((e) => e.data.by),
      ['chat-user'],
    );
  });

  it('a chat stream ends with its token: revoked mid-run, the UI gets the refusal as an error, then [DONE]', async () => {
    h.fake.enqueue(hang());
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const minted = await mint(h.api, { session_id: id, scopes: ['read', 'message'] });
    const res = await fetch(`${h.service.url}/v1/chat`, {
      method: 'POST',
      headers: { authorization: `Bearer ${minted.body.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        id,
        trigger: 'submit-message',
        messages: [{ id: 'm1', role: 'user', parts: [{ type: 'text', text: 'Hi' }] }],
      }),
    });
    assert.equal(res.status, 200);
    // The run hangs upstream: only the revocation can end this stream.
    await h.api.waitStatus(id, 'running');
    assert.equal((await h.api.req('DELETE', `/v1/client-tokens/${minted.body.id}`)).status, 200);
    const data = sseDataLines(await res.text());
    assert.equal(data.at(-1), '[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as { type: string; errorText?: string });
    assert.match(chunks.find((c) => c.type === 'error')?.errorText ?? '', /^unauthorized:/);
    assert.equal(chunks.at(-1)?.type, 'finish');
    await h.api.post(`/v1/sessions/${id}/cancel`);
  });

  it("Idempotency-Key: a token's keys are its session's, never another session's of the tenant", async () => {
    h.fake.enqueue(text('One.'), text('Two.'));
    const s1 = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const s2 = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t1 = h.api.as(await token(h.api, s1, ['message']));
    const t2 = h.api.as(await token(h.api, s2, ['message']));
    const key = { 'idempotency-key': 'user-K' };
    const first = await t1.post(`/v1/sessions/${s1}/messages`, { text: 'hi' }, key);
    assert.equal(first.status, 202);
    // Another session's token with the same key: its own request, neither refused nor told of s1's.
    const other = await t2.post(`/v1/sessions/${s2}/messages`, { text: 'hi' }, key);
    assert.equal(other.status, 202, JSON.stringify(other.body));
    assert.equal(other.headers.get('idempotent-replayed'), null);
    assert.equal((await t2.post(`/v1/sessions/${s2}/messages`, { text: 'other' }, key)).status, 422);
    // Another token of the same session (a page reloaded with a fresh token) shares its keys: the answer replayed.
    const again = await h.api
      .as(await token(h.api, s1, ['message']))
      .post(`/v1/sessions/${s1}/messages`, { text: 'hi' }, key);
    assert.equal(again.status, 202);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(again.body, first.body);
    // The tenant's key keeps its own keys, apart from its tokens'.
    const byKey = await h.api.post(`/v1/sessions/${s2}/messages`, { text: 'from the backend' }, key);
    assert.equal(byKey.status, 202, JSON.stringify(byKey.body));
    assert.equal(byKey.headers.get('idempotent-replayed'), null);
    for (const id of [s1, s2]) await h.api.waitStatus(id, 'idle');
  });

  it('expired: 401 token_expired on REST and on the upgrade; an hour later unknown', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t = await token(h.api, id, ['read']);
    assert.equal((await h.api.as(t).get(`/v1/sessions/${id}`)).status, 200);
    // The clock, moved: the record's expiry set to a second ago (as ttl_s after minting).
    await moveExpiry(r, id, Date.now() - 1000);
    const res = await h.api.as(t).get(`/v1/sessions/${id}`);
    assert.equal(res.status, 401);
    assert.equal(res.body.error.code, 'token_expired');
    await assert.rejects(connectWs(h.service.url, id, { protocolToken: t }), refused(401, 'token_expired'));
    assert.equal((await connectSse(h.service.url, id, { token: t })).status, 401);
    // The record's TTL passed (the hash expires an hour after the longest expiry): unknown.
    await r.del(`s:{${id}}:ct`);
    assert.equal((await h.api.as(t).get(`/v1/sessions/${id}`)).body.error.code, 'unauthorized');
  });

  it('revoked or its session deleted: 401 unauthorized at once; open streams end with it', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const minted = await mint(h.api, { session_id: id, scopes: ['read', 'message'] });
    const t = minted.body.token as string;
    const ws = await connectWs(h.service.url, id, { protocolToken: t });
    const sse = await connectSse(h.service.url, id, { token: t });
    await sse.waitEvent((e) => e.type === 'session.created', 'SSE replay');
    // Another tenant cannot revoke it; a malformed id is not found.
    assert.equal(
      (await h.api.as('key-globex').req('DELETE', `/v1/client-tokens/${minted.body.id}`)).status,
      404,
    );
    assert.equal((await h.api.req('DELETE', '/v1/client-tokens/ctk_nope')).status, 404);
    const del = await h.api.req('DELETE', `/v1/client-tokens/${minted.body.id}`);
    assert.deepEqual(del.body, { id: minted.body.id, object: 'client_token', deleted: true });
    assert.equal((await h.api.req('DELETE', `/v1/client-tokens/${minted.body.id}`)).status, 404);
    const res = await h.api.as(t).get(`/v1/sessions/${id}`);
    assert.equal(res.status, 401);
    // Both changes are events of the session (contract §7: an event for every change); the token is in neither.
    const log = (await h.api.get(`/v1/sessions/${id}/events?limit=100`)).body.data.filter((e: any) =>
      e.type.startsWith('client_token.'),
    );
    assert.deepEqual(
      log.map((e: any) => [e.type, e.data.id]),
      [
        ['client_token.created', minted.body.id],
        ['client_token.revoked', minted.body.id],
      ],
    );
    assert.deepEqual(log[0].data.scopes, ['read', 'message']);
    assert.equal(log[0].data.expires_at, minted.body.expires_at);
    assert.ok(!JSON.stringify(log).includes(t));
    assert.equal(res.body.error.code, 'unauthorized');
    // Both streams end at the revocation's event (test/security/client-tokens-revocation.test.ts).
    const closed = await ws.closed;
    assert.equal(closed.code, 4401);
    assert.ok(ws.frames.items.some((f) => f.type === 'error' && f.error.code === 'unauthorized'));
    await sse.ended;
    assert.ok(sse.records.items.some((rec) => rec.event === 'error' && rec.data.includes('unauthorized')));

    // A token gone without its event (its record removed behind the service's back): a frame on the open socket is
    // refused and the socket closed; the idle SSE stream ends at its next check (STREAM_HEARTBEAT_MS).
    const quiet = await mint(h.api, { session_id: id, scopes: ['read', 'message'] });
    const ws2 = await connectWs(h.service.url, id, { protocolToken: quiet.body.token });
    const sse2 = await connectSse(h.service.url, id, { token: quiet.body.token });
    await sse2.waitEvent((e) => e.type === 'session.created', 'SSE replay');
    const hash = await r.hget(`s:{${id}}:ct`, `i:${quiet.body.id}`);
    assert.equal(await r.hdel(`s:{${id}}:ct`, `i:${quiet.body.id}`, `h:${hash}`), 2);
    ws2.send({ type: 'message', ref: 'late', text: 'x' });
    assert.equal((await ws2.closed).code, 4401);
    assert.ok(ws2.frames.items.some((f) => f.type === 'error' && f.error.code === 'unauthorized'));
    await sse2.ended;
    assert.ok(sse2.records.items.some((rec) => rec.event === 'error' && rec.data.includes('unauthorized')));

    // Deleting the session revokes its tokens (its token hash goes with its keys).
    const t2 = await token(h.api, id, ['read']);
    assert.equal((await h.api.as(t2).get(`/v1/sessions/${id}`)).status, 200);
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal((await h.api.as(t2).get(`/v1/sessions/${id}`)).body.error.code, 'unauthorized');
    assert.equal(await r.exists(`s:{${id}}:ct`), 0);
  });
});

describe('client tokens in open mode', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());

  it('are minted without a key and still restrict who holds one', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const t = await token(h.api, id, ['read']);
    assert.equal((await h.api.as(t).get(`/v1/sessions/${id}`)).status, 200);
    assert.equal((await h.api.as(t).get('/v1/sessions')).status, 403);
    assert.equal((await h.api.get('/v1/sessions')).status, 200);
  });
});

describe('client tokens and the tenant rate limit', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS, RATE_LIMIT_PER_MIN: '3' } });
  });
  after(async () => h.close());

  it("count in their tenant's rate limit, with its key's requests", async () => {
    h.fake.enqueue(text('Hi.'));
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string; // 1
    const t = await token(h.api, id, ['message']); // 2
    assert.equal((await h.api.as(t).post(`/v1/sessions/${id}/messages`, { text: 'one' })).status, 202); // 3
    const over = await h.api.post('/v1/sessions', { start: false });
    assert.equal(over.status, 429);
    assert.equal(over.body.error.code, 'rate_limited');
    // Another tenant is not counted with it.
    assert.equal((await h.api.as('key-globex').post('/v1/sessions', { start: false })).status, 201);
  });
});

describe('client tokens across replicas', { timeout: 180_000 }, () => {
  let redis: TestRedis;
  let fake: FakeAnthropic;
  let a: ServiceProcess;
  let b: ServiceProcess;
  before(async () => {
    [redis, fake] = await Promise.all([startTestRedis(), startFakeAnthropic({ strictAlternation: true })]);
    const env = serviceEnv(redis.url, fake.url, { API_KEYS: KEYS, RATE_LIMIT_PER_MIN: '0' });
    [a, b] = await Promise.all([spawnService(env, { name: 'a' }), spawnService(env, { name: 'b' })]);
  });
  after(async () => {
    await Promise.all([a?.kill(), b?.kill()]);
    await fake?.close();
    await redis?.stop();
  });

  it('a token minted on one replica works on the other, and its revocation holds there at once', async () => {
    const ka = a.api.as('key-acme');
    const id = (await ka.post('/v1/sessions', { start: false })).body.id as string;
    const minted = await mint(ka, { session_id: id, scopes: ['read'] });
    const t = minted.body.token as string;
    assert.equal((await b.api.as(t).get(`/v1/sessions/${id}`)).status, 200);
    assert.equal((await ka.req('DELETE', `/v1/client-tokens/${minted.body.id}`)).status, 200);
    const res = await b.api.as(t).get(`/v1/sessions/${id}`);
    assert.equal(res.status, 401);
    assert.equal(res.body.error.code, 'unauthorized');
    // Deleting the session on B revokes a token minted on A.
    const t2 = await token(ka, id, ['read']);
    assert.equal((await a.api.as(t2).get(`/v1/sessions/${id}`)).status, 200);
    assert.equal((await b.api.as('key-acme').req('DELETE', `/v1/sessions/${id}`)).status, 200);
    assert.equal((await a.api.as(t2).get(`/v1/sessions/${id}`)).status, 401);
    // Never logged.
    for (const p of [a, b]) {
      const logs = JSON.stringify(p.logs());
      assert.ok(!logs.includes(t) && !logs.includes(t2), `${p.name} logged a token`);
    }
  });
});

/** The id of the token `t` of session `id`, read from its record (what `by` falls back to without a subject). */
async function tokenIdOf(r: Redis, id: string, t: string): Promise<string | undefined> {
  const { createHash } = await import('node:crypto');
  const raw = await r.hget(`s:{${id}}:ct`, `h:${createHash('sha256').update(t).digest('hex')}`);
  return raw ? (JSON.parse(raw) as { id: string }).id : undefined;
}

/** Sets the expiry of every token record of session `id` to `at` (ms). */
async function moveExpiry(r: Redis, id: string, at: number): Promise<void> {
  const fields = await r.hgetall(`s:{${id}}:ct`);
  for (const [field, value] of Object.entries(fields)) {
    if (!field.startsWith('h:')) continue;
    await r.hset(`s:{${id}}:ct`, field, JSON.stringify({ ...JSON.parse(value), expires_at: at }));
  }
}
