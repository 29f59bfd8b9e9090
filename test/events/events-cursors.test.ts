/**
 * Every events cursor is validated, on the JSON pages, SSE (query and Last-Event-ID) and the WebSocket: malformed →
 * 400 `invalid_request`, past the newest event → 400 `invalid_cursor`, trimmed → 410 (events-access.test.ts);
 * never a 5xx. The relay itself never fails on a cursor it is given.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import pino from 'pino';
import { startHarness, type Harness } from '../helpers/service.js';
import { compareIds } from '../../src/events/cursor.js';
import { EventHub } from '../../src/events/hub.js';
import type { Sink } from '../../src/events/reader.js';
import { SessionChannels } from '../../src/store/channels.js';
import { EventLog, nextId } from '../../src/store/events.js';
import { SessionStore } from '../../src/store/store.js';
import { eventLogKeys } from '../../src/store/keys.js';
import { connectSse, connectWs, UpgradeRefused } from '../fixtures/event-clients.js';

const MAX = '18446744073709551615-18446744073709551615';

const refused = (status: number, code: string) => (err: unknown) => {
  assert.ok(err instanceof UpgradeRefused, String(err));
  assert.equal(err.status, status);
  assert.equal(err.body.error.code, code);
  return true;
};

describe('event cursors', () => {
  let h: Harness;
  before(async () => {
    h = await startHarness();
  });
  after(async () => h.close());

  async function sessionWithEvents() {
    const created = await h.api.post('/v1/sessions', { start: false });
    const id: string = created.body.id;
    const page = await h.api.get(`/v1/sessions/${id}/events`);
    assert.ok(page.body.data.length > 0);
    return { id, lastId: page.body.data.at(-1).id as string };
  }

  /** SSE with a cursor in the query or in Last-Event-ID: the status and JSON body of the answer. */
  async function sse(id: string, cursor: { after?: string; lastEventId?: string }) {
    const u = new URL(`/v1/sessions/${id}/events`, h.service.url);
    if (cursor.after !== undefined) u.searchParams.set('after', cursor.after);
    const res = await fetch(u, {
      headers: {
        accept: 'text/event-stream',
        ...(cursor.lastEventId !== undefined ? { 'last-event-id': cursor.lastEventId } : {}),
      },
    });
    const type = res.headers.get('content-type') ?? '';
    const body = type.startsWith('application/json') ? await res.json() : null;
    if (!body) await res.body?.cancel();
    return { status: res.status, body: body as any };
  }

  it('GET …/events answers SSE for an Accept that prefers it (any case, q above 0), else the JSON page', async () => {
    const { id } = await sessionWithEvents();
    for (const [accept, want] of [
      ['text/event-stream', 'text/event-stream'],
      ['TEXT/Event-Stream', 'text/event-stream'],
      ['application/json;q=0.5, text/event-stream', 'text/event-stream'],
      ['text/event-stream;q=0', 'application/json'],
      ['text/event-stream;q=0.2, application/json', 'application/json'],
      ['application/json', 'application/json'],
    ] as const) {
      const res = await fetch(new URL(`/v1/sessions/${id}/events`, h.service.url), { headers: { accept } });
      assert.equal(res.status, 200, accept);
      assert.ok(
        (res.headers.get('content-type') ?? '').startsWith(want),
        `${accept}: ${res.headers.get('content-type')}`,
      );
      await res.body?.cancel();
    }
  });

  it('a cursor past the newest event gets 400 invalid_cursor on REST, SSE and WebSocket, never a 5xx', async () => {
    const { id, lastId } = await sessionWithEvents();
    const ms = BigInt(lastId.split('-')[0]!);
    const ahead = [MAX, `${ms + 1n}-0`, nextId(lastId)!, '18446744073709551615-0'];
    for (const cursor of ahead) {
      const page = await h.api.get(`/v1/sessions/${id}/events?after=${cursor}`);
      assert.equal(page.status, 400, `${cursor}: ${JSON.stringify(page.body)}`);
      assert.equal(page.body.error.code, 'invalid_cursor');
      assert.equal(page.body.error.details.last_event_id, lastId);

      for (const how of [{ after: cursor }, { lastEventId: cursor }]) {
        const r = await sse(id, how);
        assert.equal(r.status, 400, `SSE ${JSON.stringify(how)}`);
        assert.equal(r.body.error.code, 'invalid_cursor');
        assert.equal(r.body.error.details.cursor, cursor);
      }

      await assert.rejects(connectWs(h.service.url, id, { after: cursor }), refused(400, 'invalid_cursor'));
    }
  });

  it('malformed cursors get 400 invalid_request everywhere', async () => {
    const { id } = await sessionWithEvents();
    for (const bad of ['18446744073709551616-0', '0-18446744073709551616', '-1-0', '1-', 'x']) {
      const page = await h.api.get(`/v1/sessions/${id}/events?after=${encodeURIComponent(bad)}`);
      assert.equal(page.status, 400, bad);
      assert.equal(page.body.error.code, 'invalid_request');
      assert.equal((await sse(id, { after: bad })).status, 400);
      const header = await sse(id, { lastEventId: bad });
      assert.equal(header.status, 400);
      assert.equal(header.body.error.code, 'invalid_request');
      await assert.rejects(connectWs(h.service.url, id, { after: bad }), refused(400, 'invalid_request'));
    }
  });

  it('the newest id itself is a valid cursor: an empty page, and streams that wait for newer events', async () => {
    const { id, lastId } = await sessionWithEvents();
    const page = await h.api.get(`/v1/sessions/${id}/events?after=${lastId}`);
    assert.deepEqual(page.body, { data: [], next_cursor: lastId, has_more: false });
    const ws = await connectWs(h.service.url, id, { after: lastId });
    const s = await connectSse(h.service.url, id, { lastEventId: lastId });
    assert.equal(s.status, 200);
    // A change writes new events: both get them, and only them.
    assert.equal((await h.api.req('PATCH', `/v1/sessions/${id}`, { metadata: { k: 1 } })).status, 200);
    const [a, b] = await Promise.all([
      ws.waitEvent(() => true, 'the next event'),
      s.waitEvent(() => true, 'the next event'),
    ]);
    assert.ok(compareIds(a.id, lastId) > 0);
    assert.equal(b.id, a.id);
    ws.close();
    s.close();
  });

  it('the relay given a cursor past the log (or the largest id) waits for newer events instead of failing', async () => {
    const cmd = new Redis(h.redis.url);
    const sub = new Redis(h.redis.url);
    const channels = new SessionChannels(sub);
    const hub = new EventHub({ eventLog: new EventLog(cmd), channels, logger: pino({ level: 'silent' }) });
    const store = new SessionStore(cmd, { eventLogMax: 1000 });
    try {
      const id = 'ses_cursorahead001';
      await store.appendEvents(id, [['stream.event', '{"n":1}']]);
      const got: string[] = [];
      const problems: string[] = [];
      const sink = (): Sink => ({
        send: (ev) => (got.push(ev.id), true),
        ready: () => true,
        expired: () => problems.push('expired'),
        gone: () => problems.push('gone'),
        failed: (err) => problems.push(String(err)),
        shutdown() {},
      });
      const subs = [
        hub.subscribe(id, MAX, sink(), 'default'),
        hub.subscribe(id, '18446744073709551615-0', sink(), 'default'),
      ];
      const deadline = Date.now() + 10_000;
      while (!subs.every((s) => s.live)) {
        assert.ok(Date.now() < deadline, 'the subscriptions went live');
        await new Promise((r) => setTimeout(r, 10));
      }
      await store.appendEvents(id, [['stream.event', '{"n":2}']]);
      // A subscription from the start sees the new event; by then the others have been offered it too.
      const witness: string[] = [];
      const w = hub.subscribe(id, '0-0', { ...sink(), send: (ev) => (witness.push(ev.id), true) }, 'default');
      while (witness.length < 2) {
        assert.ok(Date.now() < deadline, 'the witness got both events');
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.deepEqual(problems, []);
      assert.deepEqual(got, []);
      for (const s of [...subs, w]) s.close();
    } finally {
      hub.close();
      channels.close();
      cmd.disconnect();
      sub.disconnect();
    }
  });

  it('a replay behind a deleted session whose log has expired ends (session_deleted) rather than reading for ever', async () => {
    const cmd = new Redis(h.redis.url);
    const sub = new Redis(h.redis.url);
    const channels = new SessionChannels(sub);
    const hub = new EventHub({
      eventLog: new EventLog(cmd),
      channels,
      logger: pino({ level: 'silent' }),
      pageSize: 1,
    });
    const store = new SessionStore(cmd, { eventLogMax: 1000 });
    try {
      const id = 'ses_vanishedlog01';
      await store.appendEvents(id, [
        ['stream.event', '{"n":1}'],
        ['stream.event', '{"n":2}'],
        ['stream.event', '{"n":3}'],
      ]);
      const ids = (await cmd.xrange(eventLogKeys(id)[1], '-', '+')).map(([eid]) => eid);
      const ended: string[] = [];
      const sink = (name: string, gate?: Promise<boolean>): Sink => {
        let first = true;
        return {
          send: (ev) => ev.type !== 'session.deleted' || (ended.push(`${name}:deleted`), false),
          ready: () => {
            if (!gate || !first) return true;
            first = false;
            return gate;
          },
          expired: () => ended.push(`${name}:expired`),
          gone: () => ended.push(`${name}:gone`),
          failed: (err) => ended.push(`${name}:${String(err)}`),
          shutdown() {},
        };
      };
      // A follows live; B's replay waits for its reader (a slow client) after its first page.
      const a = hub.subscribe(id, ids[2]!, sink('a'), 'default');
      let release!: (ok: boolean) => void;
      const b = hub.subscribe(id, '0-0', sink('b', new Promise((r) => (release = r))), 'default');
      for (const deadline = Date.now() + 10_000; !a.live;) {
        assert.ok(Date.now() < deadline, 'a went live');
        await new Promise((r) => setTimeout(r, 10));
      }
      // The session is deleted: its last event reaches A; then the log expires (DELETED_LOG_TTL_MS) before B reads on.
      await store.appendEvents(id, [['session.deleted', '{}']]);
      for (const deadline = Date.now() + 10_000; !ended.includes('a:deleted');) {
        assert.ok(Date.now() < deadline, 'a got session.deleted');
        await new Promise((r) => setTimeout(r, 10));
      }
      await cmd.del(...eventLogKeys(id));
      release(true);
      for (const deadline = Date.now() + 10_000; !b.closed;) {
        assert.ok(Date.now() < deadline, `b's replay ended (${JSON.stringify(ended)})`);
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.deepEqual(ended, ['a:deleted', 'b:gone']);
    } finally {
      hub.close();
      channels.close();
      cmd.disconnect();
      sub.disconnect();
    }
  });

  it('a cursor whose own event was trimmed, but nothing after it, is not expired; one before it is', async () => {
    const { id } = await sessionWithEvents();
    const cmd = new Redis(h.redis.url);
    try {
      // Another writer with a log of 3 events: the session's own events are trimmed, then x1 alone.
      const store = new SessionStore(cmd, { eventLogMax: 3 });
      await store.appendEvents(id, [
        ['stream.event', '{"n":1}'],
        ['stream.event', '{"n":2}'],
        ['stream.event', '{"n":3}'],
      ]);
      const before = (await h.api.get(`/v1/sessions/${id}/events`)).body.data.map((e: any) => e.id);
      assert.equal(before.length, 3);
      // The newest event trimmed so far: older than x1, so a cursor there has lost nothing yet.
      const [older, keptThen] = (await cmd.hget(eventLogKeys(id)[0], 'ev_cut'))!.split(' ') as [
        string,
        string,
      ];
      assert.equal(keptThen, before[0]);
      assert.ok(compareIds(older, before[0]) < 0);
      await store.appendEvents(id, [['stream.event', '{"n":4}']]);
      const [x1] = before;
      const kept = (await h.api.get(`/v1/sessions/${id}/events`)).body.data.map((e: any) => e.id);
      assert.deepEqual(kept.slice(0, 2), before.slice(1));

      // After x1: everything after it is kept, on every transport.
      const page = await h.api.get(`/v1/sessions/${id}/events?after=${x1}`);
      assert.equal(page.status, 200, JSON.stringify(page.body));
      assert.deepEqual(
        page.body.data.map((e: any) => e.id),
        kept,
      );
      const ws = await connectWs(h.service.url, id, { after: x1 });
      assert.equal((await ws.waitEvent(() => true, 'the first event')).id, kept[0]);
      ws.close();
      const s = await connectSse(h.service.url, id, { lastEventId: x1 });
      assert.equal((await s.waitEvent(() => true, 'the first event')).id, kept[0]);
      s.close();

      // Before x1: x1 was trimmed after it, so that cursor expired.
      const gone = await h.api.get(`/v1/sessions/${id}/events?after=${older}`);
      assert.equal(gone.status, 410);
      assert.equal(gone.body.error.code, 'cursor_expired');

      // A trim that did not record itself (a replica of an older release): the record is stale, and a cursor before
      // what it dropped expired, never a page with a gap.
      await cmd.xtrim(eventLogKeys(id)[1], 'MINID', kept[1]);
      const stale = await h.api.get(`/v1/sessions/${id}/events?after=${x1}`);
      assert.equal(stale.status, 410, JSON.stringify(stale.body));
      assert.equal(stale.body.error.code, 'cursor_expired');
    } finally {
      cmd.disconnect();
    }
  });
});
