/**
 * Heartbeats and an explicit end on the event streams (issue 26 item 3, docs/API.md §6.2 and §6.3): SSE `: ping`
 * comments and WebSocket `{"type":"ping"}` frames every STREAM_HEARTBEAT_MS; an `end` record/frame when the server
 * ends a stream, whose `final` tells "the run ended" (`until=run_end`) or "the session is gone" from "this
 * connection closed, the run goes on" (`shutting_down`: reconnect after `last_event_id`).
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { WebSocket } from 'ws';
import { startHarness, type Harness } from '../helpers/service.js';
import { hang, text } from '../fake/script.js';
import { connectSse, connectWs, readLog } from '../fixtures/event-clients.js';

const KEY = 'key-acme';

/** Reads the raw SSE body until `pred` holds on what came so far. */
async function readRaw(url: string, pred: (body: string) => boolean): Promise<string> {
  const controller = new AbortController();
  const res = await fetch(url, {
    headers: { accept: 'text/event-stream', authorization: `Bearer ${KEY}` },
    signal: controller.signal,
  });
  assert.equal(res.status, 200);
  const decoder = new TextDecoder();
  let body = '';
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    body += decoder.decode(chunk, { stream: true });
    if (pred(body)) break;
  }
  controller.abort();
  return body;
}

describe('stream heartbeats and ends', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness({ env: { API_KEYS: `acme:${KEY}`, STREAM_HEARTBEAT_MS: '150' } });
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  it('sends `: ping` on a quiet SSE stream and `{"type":"ping"}` on a quiet WebSocket', async () => {
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const body = await readRaw(`${h.service.url}/v1/sessions/${id}/events`, (b) => b.includes(': ping\n\n'));
    assert.match(body, /^retry: 2000\n\n/);
    const ws = await connectWs(h.service.url, id, { token: KEY });
    const ping = await ws.frames.wait((f) => f.type === 'ping', 'a ping frame');
    assert.deepEqual(ping, { type: 'ping' });
    ws.close();
  });

  it('until=run_end: the stream ends after the run stops, with a final `end` naming the last event', async () => {
    h.fake.enqueue(text('One.'), text('Two.'));
    const id = (await h.api.post('/v1/sessions', { start: false })).body.id as string;
    const cursor = (await readLog(h.service.url, id, KEY)).at(-1)!.id;
    const sse = await connectSse(h.service.url, id, { token: KEY, after: cursor });
    // SSE with `until` in the query (connectSse sets only `after`): the raw stream.
    const url = `${h.service.url}/v1/sessions/${id}/events?after=${cursor}&until=run_end`;
    const rawEnd = readRaw(url, (b) => b.includes('event: end\n'));
    const ws = await connectWs(h.service.url, id, { token: KEY, after: cursor });
    const wsUrl = `${h.service.url.replace('http', 'ws')}/v1/sessions/${id}/stream?after=${cursor}&until=run_end`;
    const wsUntil = new WebSocket(wsUrl, { headers: { authorization: `Bearer ${KEY}` } });
    const wsFrames: any[] = [];
    wsUntil.on('message', (d) => wsFrames.push(JSON.parse(String(d))));
    const wsClosed = new Promise<number>((resolve) => wsUntil.on('close', (code) => resolve(code)));
    await new Promise((resolve) => wsUntil.once('open', resolve));

    assert.equal((await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Go' })).status, 202);
    assert.equal(await wsClosed, 1000);
    const end = wsFrames.at(-1);
    const idle = wsFrames.find((f) => f.type === 'session.status' && f.data.status === 'idle');
    assert.ok(idle, 'the status that ended the run was sent');
    assert.deepEqual(end, { type: 'end', reason: 'run_ended', final: true, last_event_id: idle.id });
    assert.ok(!wsFrames.some((f) => f.type === 'message.queued' && f.revision > idle.revision));
    const body = await rawEnd;
    const endData = /event: end\ndata: (.*)\n/.exec(body)![1]!;
    assert.deepEqual(JSON.parse(endData), {
      type: 'end',
      reason: 'run_ended',
      final: true,
      last_event_id: idle.id,
    });

    // Without `until` the streams stay open across runs.
    await sse.waitEvent((e) => e.type === 'session.status' && e.data.status === 'idle', 'the first run end');
    await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Again' });
    await ws.events.wait(
      (e, all) =>
        e.type === 'session.status' &&
        e.data.status === 'idle' &&
        all.filter((x) => x.type === 'turn.completed').length === 2,
      'the second run end',
    );
    await sse.events.wait(
      (e, all) =>
        e.type === 'session.status' &&
        e.data.status === 'idle' &&
        all.filter((x) => x.type === 'turn.completed').length === 2,
      'the second run end (SSE)',
    );
    // Deleting the session ends them for good.
    await h.api.req('DELETE', `/v1/sessions/${id}`);
    await sse.ended;
    const sseEnd = sse.records.items.at(-1)!;
    assert.equal(sseEnd.event, 'end');
    assert.deepEqual(JSON.parse(sseEnd.data), {
      type: 'end',
      reason: 'session_deleted',
      final: true,
      last_event_id: sse.events.items.at(-1)!.id,
    });
    const closed = await ws.closed;
    assert.equal(closed.code, 1000);
    assert.deepEqual(ws.frames.items.at(-1), {
      type: 'end',
      reason: 'session_deleted',
      final: true,
      last_event_id: ws.lastId,
    });
  });

  it("until=run_end counts from the cursor: a replay holding a run's end ends the stream after it", async () => {
    h.fake.enqueue(text('Done.'));
    const id = (await h.api.post('/v1/sessions', { input: 'Hi' })).body.id as string;
    await h.api.waitStatus(id, 'idle');
    // From the start: the replay holds that run's end, so the stream ends after it (the first stop after the cursor).
    const body = await readRaw(`${h.service.url}/v1/sessions/${id}/events?until=run_end`, (b) =>
      b.includes('event: end\n'),
    );
    assert.match(body, /"reason":"run_ended"/);
  });

  it('a replica shutting down ends its streams with a non-final end: the run goes on', async () => {
    const other = await startHarness({
      redis: h.redis,
      fakeServer: h.fake,
      env: { API_KEYS: `acme:${KEY}`, STREAM_HEARTBEAT_MS: '150' },
    });
    let closed = false;
    try {
      h.fake.enqueue(hang());
      const id = (await h.api.post('/v1/sessions', { input: 'Wait' })).body.id as string;
      await h.fake.waitForRequests(1);
      const ws = await connectWs(other.service.url, id, { token: KEY });
      const sse = await connectSse(other.service.url, id, { token: KEY });
      await ws.waitEvent((e) => e.type === 'turn.started', 'the turn in flight');
      await sse.waitEvent((e) => e.type === 'turn.started', 'the turn in flight (SSE)');
      await other.service.close();
      closed = true;
      const code = (await ws.closed).code;
      assert.equal(code, 1001);
      assert.deepEqual(ws.frames.items.at(-1), {
        type: 'end',
        reason: 'shutting_down',
        final: false,
        last_event_id: ws.lastId,
      });
      await sse.ended;
      assert.deepEqual(JSON.parse(sse.records.items.at(-1)!.data), {
        type: 'end',
        reason: 'shutting_down',
        final: false,
        last_event_id: sse.events.items.at(-1)!.id,
      });
      assert.equal((await h.api.get(`/v1/sessions/${id}`)).body.status, 'running', 'the run goes on');
      await h.api.post(`/v1/sessions/${id}/cancel`);
    } finally {
      if (!closed) await other.service.close();
    }
  });
});
