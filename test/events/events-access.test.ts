import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { WebSocket } from 'ws';
import { startHarness, type Harness } from '../helpers/service.js';
import { hang, text, toolCall } from '../fake/script.js';
import { until } from '../durability/chaos-lib.js';
import { compareIds } from '../../src/events/cursor.js';
import {
  connectSse,
  connectWs,
  isFinalStatus,
  UpgradeRefused,
  wsUrl,
  type Envelope,
} from '../fixtures/event-clients.js';

const KEYS = 'acme:key-acme,globex:key-globex';
const runEnded = (e: Envelope, all: Envelope[]) =>
  isFinalStatus(e) && all.some((x) => x.type === 'turn.completed' && compareIds(x.id, e.id) < 0);

const refusedWith = (status: number, code: string) => (err: unknown) => {
  assert.ok(err instanceof UpgradeRefused, String(err));
  assert.equal(err.status, status);
  assert.equal(err.body.error.code, code);
  return true;
};

describe('event stream access and client frames', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: KEYS } });
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  it('refuses unauthenticated and cross-tenant WebSocket and SSE requests before the upgrade', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    assert.equal(created.status, 201);
    const id = created.body.id;
    const base = h.service.url;
    await assert.rejects(connectWs(base, id), refusedWith(401, 'unauthorized'));
    await assert.rejects(connectWs(base, id, { token: 'wrong' }), refusedWith(401, 'unauthorized'));
    await assert.rejects(connectWs(base, id, { protocolToken: 'wrong' }), refusedWith(401, 'unauthorized'));
    await assert.rejects(connectWs(base, id, { token: 'key-globex' }), refusedWith(404, 'session_not_found'));
    await assert.rejects(
      connectWs(base, id, { protocolToken: 'key-globex' }),
      refusedWith(404, 'session_not_found'),
    );
    for (const token of [undefined, 'key-globex']) {
      const sse = await connectSse(base, id, token ? { token } : {});
      assert.equal(sse.status, token ? 404 : 401);
      const page = await fetch(`${base}/v1/sessions/${id}/events`, {
        headers: token ? { authorization: `Bearer ${token}` } : {},
      });
      assert.equal(page.status, token ? 404 : 401);
    }
    // The owner gets in either way; with the subprotocol, the server selects `bearer` (never echoes the key).
    const byHeader = await connectWs(base, id, { token: 'key-acme' });
    assert.equal(byHeader.ws.protocol, '');
    const byProtocol = await connectWs(base, id, { protocolToken: 'key-acme' });
    assert.equal(byProtocol.ws.protocol, 'bearer');
    await byProtocol.waitEvent((e) => e.type === 'session.status', 'replay');
    // `bearer` is selected wherever it is among the offered protocols.
    const other = new WebSocket(wsUrl(base, id), ['chat', 'bearer', 'key-acme']);
    await once(other, 'open');
    assert.equal(other.protocol, 'bearer');
    other.terminate();
    byHeader.close();
    byProtocol.close();
  });

  it('HEAD of the SSE routes answers their headers at once and holds no stream', async () => {
    const sseOpen = async () => {
      const text = await (await fetch(`${h.service.url}/metrics`)).text();
      return Number(/^trs_event_stream_connections\{transport="sse"\} (\d+)$/m.exec(text)?.[1]);
    };
    const before = await sseOpen();
    h.fake.enqueue(hang());
    const id = (await h.api.post('/v1/sessions', { input: 'Hi' })).body.id as string;
    await h.api.waitStatus(id, 'running');
    const t = (await h.api.post('/v1/client-tokens', { session_id: id, scopes: ['read'] })).body
      .token as string;
    for (const [path, accept] of [
      [`/v1/sessions/${id}/events`, 'text/event-stream'],
      [`/v1/chat/${id}/stream`, '*/*'],
    ] as const) {
      for (const bearer of ['key-acme', t]) {
        // Node sends nothing of a HEAD answer before its end: a stream opened for one answered nothing at all.
        const res = await fetch(h.service.url + path, {
          method: 'HEAD',
          headers: { authorization: `Bearer ${bearer}`, accept },
          signal: AbortSignal.timeout(3000),
        });
        assert.equal(res.status, 200, path);
        assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/, path);
        assert.equal(await res.text(), '');
      }
    }
    // No stream was left open (nor taken from the stream quotas, which count the GET routes' streams). The gauge is
    // awaited: waitStatus's own SSE stream may still be closing on the server's side.
    await until(async () => (await sseOpen()) <= before, 5_000, 'the SSE gauge back to where it was');
    await h.api.post(`/v1/sessions/${id}/cancel`);
  });

  it('answers client frames with ack or error; a bad frame leaves the connection and session alive', async () => {
    h.fake.enqueue(text('Fine, thanks.'));
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
    const c = await connectWs(h.service.url, id, { protocolToken: 'key-acme' });

    c.send('{not json');
    const bad = await c.frames.wait((f) => f.type === 'error', 'an error frame');
    assert.deepEqual(bad, {
      type: 'error',
      ref: null,
      error: { code: 'invalid_frame', message: 'The frame is not valid JSON.' },
    });
    c.send('[1,2]');
    await c.frames.wait((f, all) => f.type === 'error' && all.length === 2, 'a second error');
    c.ws.send(Buffer.from([1, 2, 3]), { binary: true });
    await c.frames.wait((f, all) => f.type === 'error' && all.length === 3, 'a third error');
    // A prototype key is refused with its path, as in a REST body (src/json-depth.ts forbiddenKeyPath).
    c.send('{"type":"message","ref":"p1","text":"x","metadata":{"__proto__":{"a":1}}}');
    const proto = await c.frames.wait((_f, all) => all.length === 4, 'the answer to a forbidden key');
    assert.equal(proto.type, 'error');
    assert.equal(proto.error.code, 'invalid_request');
    assert.equal(proto.error.details?.[0]?.code, 'forbidden_key', JSON.stringify(proto));
    assert.equal(proto.error.details[0].path, '/metadata/__proto__');

    const unknown = await c.request({ type: 'dance', ref: 'r1' });
    assert.equal(unknown.error.code, 'invalid_request');
    const noContent = await c.request({ type: 'message', ref: 'r2' });
    assert.equal(noContent.type, 'error');
    assert.equal(noContent.error.code, 'invalid_request');
    const extra = await c.request({ type: 'message', ref: 'r3', text: 'hi', color: 'blue' });
    assert.equal(extra.error.code, 'invalid_request');
    const notAwaited = await c.request({
      type: 'tool_call.decide',
      ref: 'r4',
      tool_use_id: 'toolu_x',
      decision: 'approve',
    });
    assert.equal(notAwaited.error.code, 'nothing_awaits_approval');
    const noResult = await c.request({
      type: 'tool_result',
      ref: 'r5',
      tool_use_id: 'toolu_x',
      content: 'x',
    });
    assert.equal(noResult.error.code, 'nothing_awaits_results');
    const notRunning = await c.request({ type: 'cancel', ref: 'r6' });
    assert.equal(notRunning.error.code, 'session_not_running');
    const stale = await c.request({ type: 'message', ref: 'r7', text: 'hi', if_match: 999 });
    assert.equal(stale.error.code, 'revision_mismatch');

    assert.equal(c.ws.readyState, WebSocket.OPEN);
    const ack = await c.request({ type: 'message', ref: 'r8', text: 'How are you?' });
    assert.equal(ack.type, 'ack');
    assert.equal(typeof ack.revision, 'number');
    await c.events.wait(runEnded, 'the run the frame started');
    const session = await h.api.get(`/v1/sessions/${id}`);
    assert.equal(session.body.status, 'idle');
    assert.ok(session.body.revision >= ack.revision);
    c.close();
  });

  it('runs a tool loop steered over the socket: decide and cancel', async () => {
    h.fake.enqueue(toolCall('calculate_sum', { a: 2, b: 3 }), text('It is 5.'));
    const created = await h.api.post('/v1/sessions', {
      tools: ['calculate_sum'],
      approval: 'always',
      start: false,
    });
    const id = created.body.id;
    const c = await connectWs(h.service.url, id, { token: 'key-acme' });
    assert.equal((await c.request({ type: 'message', ref: 'm', text: 'Add 2 and 3' })).type, 'ack');
    const waiting = await c.waitEvent(
      (e) => e.type === 'session.status' && e.data.status === 'requires_action',
      'approval request',
    );
    const call = waiting.data.required_action.tool_calls[0];
    const decided = await c.request({
      type: 'tool_call.decide',
      ref: 'd',
      tool_use_id: call.id,
      decision: 'approve',
    });
    assert.equal(decided.type, 'ack', JSON.stringify(decided));
    await c.events.wait(
      (e, all) =>
        e.type === 'session.status' &&
        e.data.status === 'idle' &&
        all.some((x) => x.type === 'tool_call.decided'),
      'the end of the run',
    );
    const completed = c.events.items.find((e) => e.type === 'tool.completed');
    assert.ok(completed, 'the approved call ran');

    // A turn that never ends, cancelled over the socket.
    h.fake.enqueue(hang());
    assert.equal((await c.request({ type: 'message', ref: 'm2', text: 'Again' })).type, 'ack');
    await c.waitEvent((e) => e.type === 'turn.started' && e.data.iteration === 3, 'the hanging turn');
    const cancelled = await c.request({ type: 'cancel', ref: 'c' });
    assert.equal(cancelled.type, 'ack', JSON.stringify(cancelled));
    assert.equal(cancelled.status, 'idle');
    await c.waitEvent((e) => e.type === 'session.status' && e.data.stop_reason === 'cancelled', 'cancelled');
    c.close();
  });
});

describe('retention', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { EVENT_LOG_MAX: '50' } });
  });
  after(async () => h.close());

  it('a trimmed cursor gets cursor_expired with a way to recover, over WS, SSE and JSON', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
    const firstId = (await h.api.get(`/v1/sessions/${id}/events`)).body.data[0].id;
    // A long streamed reply writes a few hundred events; the log keeps about 50.
    h.fake.enqueue(text(Array.from({ length: 900 }, (_, i) => `w${i}`).join(' ')));
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Talk' });
    await h.api.waitStatus(id, 'idle');
    const kept = (await h.api.get(`/v1/sessions/${id}/events?limit=1000`)).body.data;
    assert.ok(kept.length < 250 && kept[0].id !== firstId, `trimmed to ${kept.length}`);
    const lastId = kept.at(-1).id;

    const page = await h.api.get(`/v1/sessions/${id}/events?after=${firstId}`);
    assert.equal(page.status, 410);
    assert.equal(page.body.error.code, 'cursor_expired');
    assert.equal(page.body.error.details.last_event_id, lastId);
    assert.equal(page.body.error.details.first_event_id, kept[0].id);
    assert.equal(page.body.error.details.history, `/v1/sessions/${id}/messages`);

    const ws = await connectWs(h.service.url, id, { after: firstId });
    const err = await ws.frames.wait((f) => f.type === 'error', 'the error frame');
    assert.equal(err.ref, null);
    assert.equal(err.error.code, 'cursor_expired');
    assert.equal(err.error.details.last_event_id, lastId);
    assert.match(err.error.message, /\/messages/);
    assert.deepEqual(await ws.closed, { code: 4410, reason: 'cursor_expired' });
    assert.equal(ws.events.items.length, 0);

    const sse = await connectSse(h.service.url, id, { lastEventId: firstId });
    await sse.ended;
    assert.equal(sse.events.items.length, 0);
    // The error record, then the stream's `end` (not final: recover, then follow again).
    const rec = sse.records.items.at(-2)!;
    assert.deepEqual(JSON.parse(sse.records.items.at(-1)!.data), {
      type: 'end',
      reason: 'cursor_expired',
      final: false,
      last_event_id: null,
    });
    assert.equal(rec.event, 'error');
    assert.equal(JSON.parse(rec.data).error.code, 'cursor_expired');
    assert.equal(JSON.parse(rec.data).error.details.last_event_id, lastId);

    // Recovery: the durable history, then the live tail from the last id.
    const history = await h.api.get(`/v1/sessions/${id}/messages`);
    assert.equal(history.status, 200);
    assert.equal(history.body.data.length, 2);
    h.fake.enqueue(text('Short now.'));
    const tail = await connectWs(h.service.url, id, { after: lastId });
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Shorter' });
    await tail.events.wait(runEnded, 'the next run');
    assert.ok(compareIds(tail.events.items[0]!.id, lastId) > 0);
    // Without a cursor, the retained log replays (no error).
    const fromStart = await connectWs(h.service.url, id);
    await fromStart.events.wait((_e, all) => all.length >= 50, 'the retained events');
    assert.equal(fromStart.frames.items.length, 0);
    tail.close();
    fromStart.close();
  });
});

describe('keepalive', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { WS_PING_MS: '100' } });
  });
  after(async () => h.close());

  it('pings idle connections, and drops a peer that stops answering', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const c = await connectWs(h.service.url, created.body.id);
    let pings = 0;
    c.ws.on('ping', () => pings++);
    await c.waitEvent((e) => e.type === 'session.status', 'replay');
    await once(c.ws, 'ping');
    await once(c.ws, 'ping');
    assert.equal(c.ws.readyState, WebSocket.OPEN);
    assert.ok(pings >= 2);
    // A peer that answers no ping is terminated (no close frame: 1006 on its side); the others stay.
    const mute = new WebSocket(wsUrl(h.service.url, created.body.id), { autoPong: false });
    const closed = await new Promise<number>((resolve) => mute.on('close', (code) => resolve(code)));
    assert.equal(c.ws.readyState, WebSocket.OPEN);
    c.close();
    assert.equal(closed, 1006);
  });
});
