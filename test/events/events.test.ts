import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { createRequire } from 'node:module';
import type { Writable } from 'node:stream';
import { startHarness, type Harness } from '../helpers/service.js';
import { text, toolCall } from '../fake/script.js';
import { envelope, OutEvent } from '../../src/events/envelope.js';
import { compareIds, parseCursor } from '../../src/events/cursor.js';
import {
  connectSse,
  connectWs,
  idsTypes,
  isFinalStatus,
  readLog,
  UpgradeRefused,
  type Envelope,
} from '../fixtures/event-clients.js';

/** The run ended: a `session.status` idle after a turn completed. */
const runEnded = (e: Envelope, all: Envelope[]) =>
  isFinalStatus(e) && all.some((x) => x.type === 'turn.completed' && compareIds(x.id, e.id) < 0);

/** ws's frame parser (not in @types/ws): what a ws client runs on the bytes it receives. */
const Receiver = createRequire(import.meta.url)('ws').Receiver as new (opts: {
  isServer: boolean;
}) => Writable;

describe('event ids', () => {
  it('parses and compares cursors numerically', () => {
    assert.equal(parseCursor(undefined), '0-0');
    assert.equal(parseCursor('0'), '0-0');
    assert.equal(parseCursor('0017-02'), '17-2');
    assert.equal(parseCursor('17'), null);
    assert.equal(parseCursor('-1-0'), null);
    assert.equal(parseCursor('18446744073709551616-0'), null);
    assert.equal(
      parseCursor('18446744073709551615-18446744073709551615'),
      '18446744073709551615-18446744073709551615',
    );
    assert.ok(compareIds('9-5', '10-0') < 0);
    assert.ok(compareIds('10-10', '10-9') > 0);
    assert.equal(compareIds('10-9', '10-9'), 0);
    assert.ok(compareIds('1700000000000-0', '999999999999-99') > 0);
  });

  it('builds whole WebSocket text frames that a client reads back, at every length encoding', async () => {
    for (const size of [0, 50, 125, 126, 200, 65_535, 65_536, 200_000]) {
      const ev = new OutEvent('ses_abcdefghijkl', {
        id: '1-0',
        type: 'stream.event',
        data: JSON.stringify({ text: 'é'.repeat(size) }),
        revision: 0,
        at: 1,
      });
      const receiver = new Receiver({ isServer: false });
      const got = new Promise<string>((resolve, reject) => {
        receiver.on('message', (data: Buffer, isBinary: boolean) =>
          isBinary ? reject(new Error('binary')) : resolve(data.toString()),
        );
        receiver.on('error', reject);
      });
      const wire = ev.wsWire();
      // Written in two pieces, as TCP may deliver it.
      receiver.write(wire.subarray(0, 3));
      receiver.write(wire.subarray(3));
      assert.equal(await got, ev.json, `payload of ${ev.wsFrame().byteLength} bytes`);
    }
  });

  it('splices the wire envelope to exactly JSON.stringify(envelope)', () => {
    for (const ev of [
      {
        id: '1700000000000-3',
        type: 'stream.event',
        data: '{"iteration":1,"event":{"type":"x"}}',
        revision: 0,
        at: 1700000000001,
      },
      {
        id: '1700000000000-4',
        type: 'session.status',
        data: '{"status":"idle","q":"a\\"b\\n"}',
        revision: 7,
        at: 1700000000002,
      },
      { id: '5-0', type: 'weird"type', data: 'null', revision: 2, at: 0 },
    ]) {
      const out = new OutEvent('ses_abcdefghijkl', ev);
      assert.equal(out.json, JSON.stringify(envelope('ses_abcdefghijkl', ev)));
      assert.deepEqual(JSON.parse(out.json), envelope('ses_abcdefghijkl', ev));
    }
  });
});

describe('live events', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());
  beforeEach(() => h.fake.reset());

  it('two WebSocket clients and one SSE client see the same sequence, stream events as they arrive', async () => {
    h.fake.enqueue(
      toolCall('calculate_sum', { a: 1, b: 2 }, { eventDelayMs: 40 }),
      text('The sum of one and two is three, and that is all.', { eventDelayMs: 10 }),
    );
    const created = await h.api.post('/v1/sessions', { tools: ['calculate_sum'], start: false });
    assert.equal(created.status, 201);
    const id = created.body.id;
    const [a, b, s] = await Promise.all([
      connectWs(h.service.url, id),
      connectWs(h.service.url, id),
      connectSse(h.service.url, id),
    ]);
    assert.equal(s.status, 200);
    assert.match(s.headers.get('content-type') ?? '', /^text\/event-stream/);
    // One SUBSCRIBE for the session in this process, however many clients watch it.
    const probe = new Redis(h.redis.url);
    assert.deepEqual(await probe.call('PUBSUB', 'NUMSUB', `ev:{${id}}`), [`ev:{${id}}`, 1]);
    probe.disconnect();
    // Everyone has the replay (session.created, session.status) before the run starts.
    await Promise.all([a, b, s].map((c) => c.waitEvent((e) => e.type === 'session.status', 'replay')));
    const posted = await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Add 1 and 2' });
    assert.equal(posted.status, 202);
    await Promise.all([a, b, s].map((c) => c.events.wait(runEnded, 'the end of the run')));
    const log = await readLog(h.service.url, id);
    const want = idsTypes(log);
    assert.deepEqual(idsTypes(a.events.items), want);
    assert.deepEqual(idsTypes(b.events.items), want);
    assert.deepEqual(idsTypes(s.events.items), want);
    const types = new Set(log.map((e) => e.type));
    for (const t of [
      'session.created',
      'message.queued',
      'turn.started',
      'stream.event',
      'turn.completed',
      'tool.started',
      'tool.completed',
      'iteration.persisted',
      'session.status',
    ]) {
      assert.ok(types.has(t), `the log has ${t}: ${[...types].join(', ')}`);
    }
    // Envelopes: parsed data, ISO time, the session's revision on state changes only.
    const first = a.events.items[0]!;
    assert.equal(first.session_id, id);
    assert.equal(first.type, 'session.created');
    assert.equal(first.data.id, id);
    assert.equal(new Date(first.at).toISOString(), first.at);
    assert.equal(typeof first.revision, 'number');
    const delta = a.events.items.find((e) => e.type === 'stream.event')!;
    assert.equal(delta.revision, null);
    assert.equal(delta.data.iteration, 1);
    assert.equal(delta.data.event.type, 'message_start');
    // Relayed as they arrive: the first stream event reached the client well before its turn completed.
    for (const c of [a, b, s]) {
      const items = c.events.items;
      const firstDelta = items.find((e) => e.type === 'stream.event' && e.data.iteration === 1)!;
      const completed = items.find((e) => e.type === 'turn.completed' && e.data.iteration === 1)!;
      assert.ok(items.indexOf(firstDelta) < items.indexOf(completed));
      assert.ok(
        completed.receivedAt - firstDelta.receivedAt > 100,
        `stream events are live: ${Math.round(completed.receivedAt - firstDelta.receivedAt)} ms`,
      );
    }
    a.close();
    b.close();
    s.close();
  });

  for (const where of ['the same process', 'another process']) {
    it(`a client that reconnects mid-turn with its last id (to ${where}) gets every missed event exactly once`, async () => {
      const other =
        where === 'another process' ? await startHarness({ redis: h.redis, fakeServer: h.fake }) : h;
      try {
        const words = Array.from({ length: 90 }, (_, i) => `word${i}`).join(' ');
        // The reply streams 36 events; the fake holds it after the 20th (the 19th relayed: the SDK does not relay
        // the fake's `ping`, its second) until the client has come back, so the client comes back mid-turn by
        // construction. (Paced only, a busy machine can bring the rest of the turn and its end to the watcher in one
        // burst: Redis stalls, and the stream relay writes what waited meanwhile in one batch.)
        const heldAt = 20;
        h.fake.enqueue(text(words, { eventDelayMs: 15, pauseAfterEvents: heldAt }));
        const created = await h.api.post('/v1/sessions', { start: false });
        const id = created.body.id;
        const first = await connectWs(h.service.url, id);
        const watcher = await connectWs(h.service.url, id);
        await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Say many words' });
        const firstDelta = await first.waitEvent(
          (e) => e.type === 'stream.event' && e.data.event.type === 'content_block_delta',
          'a first delta',
        );
        first.close();
        // The client goes away after its first delta and comes back with that id (what it had received after it, in
        // the same read, it never handled).
        const seen = first.events.items.slice(0, first.events.items.indexOf(firstDelta) + 1);
        const lastId = firstDelta.id;
        // Events go on while the client is away, up to where the stream is held.
        await watcher.events.wait(
          (_e, all) => all.filter((x) => x.type === 'stream.event').length >= heldAt - 1,
          'the events up to where the stream is held',
        );
        const away = watcher.events.items.filter(
          (x) => x.type === 'stream.event' && compareIds(x.id, lastId) > 0,
        );
        assert.ok(away.length >= 5, `events while the client is away (${away.length})`);
        assert.ok(
          !watcher.events.items.some((e) => e.type === 'turn.completed'),
          'the client came back mid-turn',
        );
        const again = await connectWs(other.service.url, id, { after: lastId });
        // The rest of the turn streams while the client replays what it missed and joins the live fan-out.
        h.fake.resume();
        await again.events.wait(runEnded, 'the end of the run');
        const log = await readLog(h.service.url, id);
        const got = [...seen, ...again.events.items];
        assert.deepEqual(idsTypes(got), idsTypes(log), 'every event exactly once, in order');
        assert.equal(new Set(got.map((e) => e.id)).size, got.length);
        assert.ok(again.events.items.some((e) => e.type === 'turn.completed'));
        // And over SSE, resuming with Last-Event-ID from the same point.
        const sse = await connectSse(other.service.url, id, { lastEventId: lastId, after: '0' });
        await sse.events.wait(runEnded, 'the end of the run over SSE');
        assert.deepEqual(idsTypes(sse.events.items), idsTypes(again.events.items));
        sse.close();
        again.close();
        watcher.close();
      } finally {
        if (other !== h) await other.close();
      }
    });
  }

  it('a client on another process sees a run live (no in-process state involved)', async () => {
    const other = await startHarness({ redis: h.redis, fakeServer: h.fake });
    try {
      h.fake.enqueue(text('Hello from the first process, slowly.', { eventDelayMs: 20 }));
      const created = await h.api.post('/v1/sessions', { start: false });
      const id = created.body.id;
      const remote = await connectWs(other.service.url, id);
      const remoteSse = await connectSse(other.service.url, id);
      await remote.waitEvent((e) => e.type === 'session.status', 'replay');
      await h.api.post(`/v1/sessions/${id}/messages`, { text: 'Hi' });
      await remote.events.wait(runEnded, 'the end of the run');
      await remoteSse.events.wait(runEnded, 'the end of the run');
      const log = await readLog(h.service.url, id);
      assert.deepEqual(idsTypes(remote.events.items), idsTypes(log));
      assert.deepEqual(idsTypes(remoteSse.events.items), idsTypes(log));
      remote.close();
      remoteSse.close();
    } finally {
      await other.close();
    }
  });

  it('pages the log as JSON and validates cursors', async () => {
    h.fake.enqueue(text('One two three four five six seven eight nine ten.'));
    const created = await h.api.post('/v1/sessions', { input: 'Count' });
    const id = created.body.id;
    await h.api.waitStatus(id, 'idle');
    const all = await readLog(h.service.url, id);
    assert.ok(all.length > 8);
    const p1 = await h.api.get(`/v1/sessions/${id}/events?limit=3`);
    assert.equal(p1.status, 200);
    assert.deepEqual(idsTypes(p1.body.data), idsTypes(all.slice(0, 3)));
    assert.equal(p1.body.has_more, true);
    assert.equal(p1.body.next_cursor, all[2]!.id);
    const p2 = await h.api.get(`/v1/sessions/${id}/events?after=${p1.body.next_cursor}&limit=1000`);
    assert.deepEqual(idsTypes(p2.body.data), idsTypes(all.slice(3)));
    assert.equal(p2.body.has_more, false);
    const tail = await h.api.get(`/v1/sessions/${id}/events?after=${all.at(-1)!.id}`);
    assert.deepEqual(tail.body, { data: [], next_cursor: all.at(-1)!.id, has_more: false });
    for (const bad of ['abc', '12', '1-2-3', '99999999999999999999999-0']) {
      const r = await h.api.get(`/v1/sessions/${id}/events?after=${bad}`);
      assert.equal(r.status, 400, bad);
      assert.equal(r.body.error.code, 'invalid_request');
      await assert.rejects(connectWs(h.service.url, id, { after: bad }), (err: unknown) => {
        assert.ok(err instanceof UpgradeRefused);
        assert.equal(err.status, 400);
        return true;
      });
    }
    const badSse = await fetch(`${h.service.url}/v1/sessions/${id}/events`, {
      headers: { accept: 'text/event-stream', 'last-event-id': 'nope' },
    });
    assert.equal(badSse.status, 400);
    assert.equal(((await badSse.json()) as any).error.code, 'invalid_request');
    assert.equal((await h.api.get(`/v1/sessions/${id}/events?limit=1001`)).status, 400);
    assert.equal((await h.api.get('/v1/sessions/ses_doesnotexist0000/events')).status, 404);
  });

  it('ends WebSocket and SSE streams after session.deleted', async () => {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id = created.body.id;
    const ws = await connectWs(h.service.url, id);
    const sse = await connectSse(h.service.url, id);
    await Promise.all([ws, sse].map((c) => c.waitEvent((e) => e.type === 'session.status', 'replay')));
    assert.equal((await h.api.req('DELETE', `/v1/sessions/${id}`)).status, 200);
    const closed = await ws.closed;
    assert.deepEqual(closed, { code: 1000, reason: 'session_deleted' });
    await sse.ended;
    assert.equal(ws.events.items.at(-1)!.type, 'session.deleted');
    assert.equal(sse.events.items.at(-1)!.type, 'session.deleted');
    await assert.rejects(connectWs(h.service.url, id), (err: unknown) => {
      assert.ok(err instanceof UpgradeRefused);
      assert.equal(err.status, 404);
      return true;
    });
  });
});
